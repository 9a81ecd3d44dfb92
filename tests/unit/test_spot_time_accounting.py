"""Where a pull-vs-push run's slot-seconds went (rollarc/bench/spot_ray.py: time_accounting), by hand."""

import pytest

from rollarc.bench.spot_ray import time_accounting
from rollarc.diffusion.spot_explorer import slot_of, worker_name


def test_worker_names_carry_their_slot():
    assert worker_name(3, 2) == "spot3-g2" and slot_of("spot3-g2") == 3 and slot_of(worker_name(12, 0)) == 12


def test_slot_seconds_split_by_hand():
    start = 1000.0  # the epoch clock when the jobs were handed out
    results = [
        {"worker": "spot0-g0", "seconds": 2.0, "done_at": start + 2.0},
        {"worker": "spot0-g1", "seconds": 2.0, "done_at": start + 9.0},  # slot 0's replacement, last at 9 s
        {"worker": "spot1-g0", "seconds": 3.0, "done_at": start + 3.0},
        {"worker": "spot1-g0", "seconds": 3.0, "done_at": start + 6.0},  # slot 1's last job ends at 6 s
    ]
    events = [
        (-4.0, "join", "spot0-g0"),  # the first joins come before the clock starts: not a loss
        (-3.0, "join", "spot1-g0"),
        (2.5, "notice (1 s)", "spot0-g0"),
        (3.5, "preempted", "spot0-g0"),
        (6.0, "join", "spot0-g1"),  # slot 0 without a node from 3.5 s to 6 s
    ]
    out = time_accounting(results, events, slots=2, start_epoch=start, wall_s=10.0)
    assert out["slot_s"] == 20.0
    assert out["busy_slot_s"] == 10.0
    assert out["down_slot_s"] == pytest.approx(2.5)
    assert out["tail_idle_slot_s"] == pytest.approx(1.0 + 4.0)  # slot 0 idle after 9 s, slot 1 after 6 s
    assert out["other_slot_s"] == pytest.approx(20.0 - 10.0 - 2.5 - 5.0)
    assert out["busy_share"] == 0.5 and out["job_s_median"] == 2.5


def test_a_slot_never_replaced_is_down_until_the_end():
    results = [{"worker": "spot0-g0", "seconds": 1.0, "done_at": 101.0}]
    events = [(4.0, "lost without notice", "spot1-g0")]
    out = time_accounting(results, events, slots=2, start_epoch=100.0, wall_s=10.0)
    assert out["down_slot_s"] == 6.0
    # slot 0 idles after 1 s; slot 1 finished nothing: idle until its loss at 4 s, then down (counted once)
    assert out["tail_idle_slot_s"] == 9.0 + 4.0
    assert out["other_slot_s"] == 20.0 - 1.0 - 6.0 - 13.0
