"""SP recovery timed inside a training run (rollarc/bench/spot_train.py): the figures are read from the run's
own summary, and the ratio is the medians' (hand-computed here)."""

import pytest

from rollarc.bench.spot_train import recovery_in_run
from rollarc.diffusion.spot_queue import recovery_speedup


def test_recovery_speedup_is_the_ratio_of_medians() -> None:
    # cold starts 4.0, 5.0, 9.0 s (median 5.0); regroups 0.1, 0.4 s (median 0.25): 20x
    assert recovery_speedup([9.0, 4.0, 5.0], [0.4, 0.1]) == pytest.approx(20.0)
    assert recovery_speedup([], [0.1]) is None and recovery_speedup([4.0], []) is None


def test_recovery_in_run_reads_the_runs_summary() -> None:
    summary = {
        "spot": {
            "sp_regroup_s": [0.05, 0.07],
            "sp_cold_start_s": [3.0, 3.2],
            "sp_recovery_speedup": 52.5,
            "preemptions": 4,
            "lost_jobs": 0,
            "duplicate_jobs": 0,
            "notice_source": "ray_drain",
            "drain_notices": 3,
        }
    }
    got = recovery_in_run(summary)
    assert got == {
        "regroup_s": [0.05, 0.07],
        "cold_start_s": [3.0, 3.2],
        "recovery_speedup": 52.5,
        "preemptions": 4,
        "lost_jobs": 0,
        "duplicate_jobs": 0,
        "notice_source": "ray_drain",
        "drain_notices": 3,
    }
    assert recovery_in_run({})["recovery_speedup"] is None  # a run without spot: no figure made up
