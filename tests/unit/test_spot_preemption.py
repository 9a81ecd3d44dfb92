"""Preemption schedules (trace and rate) and the fleet model: pull loses nothing with notice, push restarts."""

import itertools

import pytest

from rollarc.config.io import ConfigError
from rollarc.diffusion.config import load_t2i_config
from rollarc.diffusion.spot_setup import cost_summary, preemption_schedule, spot_slots
from rollarc.spotlight.fleet_sim import run_pull, run_push
from rollarc.spotlight.preemption import Preemption, at_rate, busy_slot, from_trace, what_is_hit


def test_trace_rows_are_checked_and_sorted():
    rows = [{"at_s": 5, "slot": 1, "notice_s": 2}, {"at_s": 1.5, "slot": 0}]
    assert from_trace(rows, slots=2) == [Preemption(1.5, 0, 0.0), Preemption(5.0, 1, 2.0)]
    with pytest.raises(ValueError, match=r"trace row 0 .*slot must be in \[0, 2\)"):
        from_trace([{"at_s": 1, "slot": 2}], slots=2)
    with pytest.raises(ValueError, match="needs at_s and slot"):
        from_trace([{"at": 1, "slot": 0}], slots=2)


def test_rate_schedule_is_seeded_and_spaced_by_the_replacement():
    a = at_rate(3600.0, slots=2, horizon_s=100, notice_s=2, replacement_s=5, seed=1)
    assert a == at_rate(3600.0, slots=2, horizon_s=100, notice_s=2, replacement_s=5, seed=1)
    assert a != at_rate(3600.0, slots=2, horizon_s=100, notice_s=2, replacement_s=5, seed=2)
    assert at_rate(0.0, 2, 100, 2, 5, 0) == []
    for slot in (0, 1):
        times = [p.at_s for p in a if p.slot == slot]
        assert all(b - t >= 7 for t, b in itertools.pairwise(times))
        assert times and all(t < 100 for t in times)


def test_pull_with_notice_loses_no_step_and_push_restarts_by_hand():
    """2 slots, 4 jobs of 4 steps; slot 0 gets a notice at tick 2, is gone at tick 3, back at tick 5."""
    pre = [Preemption(2, 0, 1)]
    pull = run_pull(4, 4, 2, pre, replacement=2, lease=3, max_ticks=100)
    assert (pull.completed, pull.duplicates, pull.lost_steps) == (4, 0, 0)
    assert pull.work_steps == 16  # every step done once
    push = run_push(4, 4, 2, pre, replacement=2, max_ticks=100)
    # slot 0 did 3 steps of job 0 (ticks 0-2), lost them at tick 3, resumes at tick 5: jobs 0, 2 → done at tick 13
    assert (push.completed, push.duplicates, push.lost_steps, push.ticks) == (4, 0, 3, 13)
    assert pull.ticks < push.ticks


def test_pull_without_notice_loses_the_steps_and_requeues_on_expiry():
    pull = run_pull(2, 4, 2, [Preemption(2, 0, 0)], replacement=50, lease=3, max_ticks=100)
    assert (pull.completed, pull.duplicates, pull.lost_steps) == (2, 0, 2)
    assert pull.work_steps == 8 + 2


def test_shipped_config_and_trace_load_and_bad_traces_name_the_key(tmp_path):
    cfg = load_t2i_config("configs/t2i_spot.yaml")
    schedule = preemption_schedule(cfg)
    assert [p.notice_s for p in schedule] == [2.0, 0.0, 1.0, 2.0]  # with and without notice
    assert spot_slots(cfg) == ("pool_spot", 2)
    rate = load_t2i_config("configs/t2i_spot.yaml", ["spot.trace=null", "spot.horizon_s=600"])
    assert preemption_schedule(rate) == at_rate(60.0, 2, 600, 2.0, 3.0, 0)
    bad = tmp_path / "trace.yaml"
    bad.write_text("preemptions:\n  - {at_s: 1, slot: 5}\n")
    with pytest.raises(ConfigError, match=r"spot.trace .*slot must be in \[0, 2\)"):
        preemption_schedule(load_t2i_config("configs/t2i_spot.yaml", [f"spot.trace={bad}"]))
    with pytest.raises(ConfigError, match=r"spot\.enabled needs explore\.enabled"):
        load_t2i_config("configs/t2i_spot.yaml", ["explore.enabled=false"])


def test_cost_summary_prices_roles_on_demand_and_explorers_at_spot():
    cfg = load_t2i_config("configs/t2i_spot.yaml")
    cost = cost_summary(cfg, 3600.0, {"spot0-g0": 1800.0, "spot1-g0": 3600.0})
    # catalogue cpu node: 2.0 USD/h on demand, spot factor 0.3; trainer + sampler 1 unit each, 2 spot slots
    assert cost == pytest.approx(
        {
            "on_demand_roles_usd": 4.0,
            "explorers_spot_usd": 1.5 * 0.6,
            "explorers_on_demand_usd": 4.0,
            "spot_node_hours": 1.5,
        }
    )


def test_busy_slot_is_the_worker_furthest_into_a_job():
    slot_of = {"spot0-g0": 0, "spot1-g0": 1, "spot2-g1": 2}
    held = {10: ("spot0-g0", 3), 11: ("spot1-g0", 7), 12: ("spot2-g1", 7)}
    assert busy_slot(held, slot_of) == 1  # 7 steps beats 3; a tie at 7 goes to the lower slot
    assert busy_slot({10: ("spot0-g0", 3), 12: ("spot2-g1", 5)}, slot_of) == 2


def test_busy_slot_skips_fresh_leases_and_workers_that_are_gone():
    slot_of = {"spot0-g1": 0}
    assert busy_slot({1: ("spot0-g1", 0)}, slot_of) is None  # leased, nothing done yet: nothing to commit
    assert busy_slot({1: ("spot0-g0", 9)}, slot_of) is None  # the lease of a worker already removed
    assert busy_slot({}, slot_of) is None
    assert busy_slot({1: ("spot0-g1", 0)}, slot_of, min_step=0) == 0


def test_a_noticed_preemption_of_an_sp_group_takes_one_member_else_the_node():
    assert what_is_hit(2.0, members=2) == "member"  # the survivor regroups, the job goes on
    assert what_is_hit(2.0, members=1) == "node"  # a last member: the node goes, the latent is committed
    assert what_is_hit(0.0, members=4) == "node"  # no notice: nothing can regroup in time, the lease expires
