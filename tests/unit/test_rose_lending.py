"""The lending policy's hysteresis, the looped trace replay, and a turn's sampling after a preemption
(hand-set times and values; no clock)."""

from __future__ import annotations

import pytest

from rollarc.config.harvest import HarvestConfig, ReplayConfig
from rollarc.engine.types import SamplingParams
from rollarc.policy.lending import LendingPolicy
from rollarc.rose.trace import TraceRequest, write_trace
from rollarc.rose.trace_loop import TraceLoop, harvest_trace
from rollarc.rose.turns import Turn


def test_lends_after_steady_headroom_and_withdraws_after_steady_drought() -> None:
    policy = LendingPolicy(lend_after_s=0.5, withdraw_after_s=0.3, min_capacity=2)
    assert policy.observe(0.0, 4) is None  # headroom seen, not for long enough yet
    assert policy.observe(0.4, 1) is None  # below min_capacity: the wait starts over
    assert policy.observe(0.5, 3) is None
    assert policy.observe(0.9, 3) is None  # 0.4 s of headroom
    assert policy.observe(1.0, 3) == "lend" and policy.lent  # 0.5 s
    assert policy.observe(1.1, 0) is None  # no headroom: the drought starts
    assert policy.observe(1.2, 1) is None  # some headroom again: the drought is broken
    assert policy.observe(1.3, 0) is None
    assert policy.observe(1.5, 0) is None  # 0.2 s
    assert policy.observe(1.6, 0) == "withdraw" and not policy.lent  # 0.3 s
    assert policy.observe(1.7, 5) is None  # re-lending waits the full lend_after_s again
    assert policy.observe(2.2, 5) == "lend"


def test_a_policy_that_does_not_lend_never_lends_however_long_the_headroom() -> None:
    policy = LendingPolicy(lend_after_s=0.0, withdraw_after_s=0.0, lends=False)
    assert [policy.observe(t, 8) for t in (0.0, 1.0, 100.0)] == [None, None, None] and not policy.lent
    assert policy.observe(101.0, 0) is None  # and never withdraws what it never lent


def test_step_tells_the_router_to_lend_resize_and_withdraw() -> None:
    """What the HarvestPool does on each report: nothing while unlent, lend, resize while lent, withdraw."""
    policy = LendingPolicy(lend_after_s=0.5, withdraw_after_s=0.5)
    reports = [(0.0, 2), (0.25, 2), (0.5, 3), (0.75, 1), (1.0, 0), (1.25, 0), (1.5, 0)]
    assert [policy.step(t, c) for t, c in reports] == [None, None, "lend", "resize", "resize", "resize", "withdraw"]
    assert policy.step(1.75, 4) is None and not policy.lent  # withdrawn: unlent again, the wait starts over


def test_trace_loop_repeats_the_window_end_to_end() -> None:
    window = [TraceRequest(0.5, 10, 2), TraceRequest(1.5, 20, 3)]
    loop = TraceLoop(window, period_s=2.0)
    assert loop.until(0.4) == []
    assert loop.until(1.5) == [TraceRequest(0.5, 10, 2), TraceRequest(1.5, 20, 3)]
    assert loop.until(3.9) == [TraceRequest(2.5, 10, 2), TraceRequest(3.5, 20, 3)]  # the second pass
    assert loop.until(4.5) == [TraceRequest(4.5, 10, 2)]
    with pytest.raises(ValueError, match="period_s"):
        TraceLoop(window, period_s=0.0)


def test_trace_loop_with_laps_runs_dry_after_them() -> None:
    window = [TraceRequest(0.5, 10, 2), TraceRequest(1.5, 20, 3)]
    once = TraceLoop(window, period_s=2.0, laps=1)  # rollarc bench rose: every set-up serves the same requests
    assert once.until(1.0) == [TraceRequest(0.5, 10, 2)]
    assert once.until(100.0) == [TraceRequest(1.5, 20, 3)]  # not the second pass
    assert once.until(1000.0) == []
    twice = TraceLoop(window, period_s=2.0, laps=2)
    assert [r.arrival_s for r in twice.until(100.0)] == [0.5, 1.5, 2.5, 3.5]
    with pytest.raises(ValueError, match="laps"):
        TraceLoop(window, period_s=2.0, laps=0)


def test_harvest_trace_reads_the_path_and_applies_scale_offset_and_window(tmp_path) -> None:
    path = write_trace(tmp_path / "t.csv", [TraceRequest(t, 160, 32) for t in (0.0, 2.0, 4.0, 6.0, 8.0)])
    replay = ReplayConfig(time_scale=2.0, token_scale=0.5, offset_s=1.0, duration_s=2.0, max_output_tokens=10)
    window = harvest_trace(HarvestConfig(trace_path=str(path), replay=replay))
    # arrivals 0,1,2,3,4 s after time scaling; [offset 1, offset + duration 3] kept, made relative to the offset
    assert window == [TraceRequest(0.0, 80, 10), TraceRequest(1.0, 80, 10), TraceRequest(2.0, 80, 10)]


def test_synthetic_harvest_trace_is_seeded_and_bursty() -> None:
    cfg = HarvestConfig.model_validate(
        {"synthetic": {"rate_per_s": 1.0, "burst_every_s": 10.0, "burst_len_s": 5.0, "burst_factor": 9.0}}
    )
    window = harvest_trace(cfg)
    assert window == harvest_trace(cfg)
    assert max(r.arrival_s for r in window) <= cfg.replay.duration_s
    in_burst = sum(1 for r in window if r.arrival_s % 10.0 < 5.0)
    assert in_burst > 3 * (len(window) - in_burst)  # 9x the rate in half of the time


def test_a_resumed_turn_keeps_the_callers_sampling_and_generates_only_what_is_left() -> None:
    params = SamplingParams(temperature=0.7, top_k=5, max_tokens=6, stop_token_ids=(3,), seed=11)
    turn = Turn("t", "traj", [1, 2], 6, params=params)
    turn.extend([7, 8], [-0.1, -0.2], [4, 4])
    resumed = turn.sampling()
    assert resumed == SamplingParams(temperature=0.7, top_k=5, max_tokens=4, stop_token_ids=(3,), seed=11)
    assert Turn("u", "traj", [1], 3).sampling() == SamplingParams(temperature=1.0, max_tokens=3, ignore_eos=True)


def test_a_relative_trace_path_is_resolved_where_the_config_is_read(tmp_path, monkeypatch) -> None:
    # Regression: the path was read inside the co-serving Ray actor, whose working directory may differ.
    write_trace(tmp_path / "t.csv", [TraceRequest(0.0, 8, 4)])
    monkeypatch.chdir(tmp_path)
    cfg = HarvestConfig(trace_path="t.csv")
    assert cfg.trace_path == str((tmp_path / "t.csv").resolve())
    with pytest.raises(ValueError, match=r"harvest\.trace_path missing\.csv is not a file"):
        HarvestConfig(trace_path="missing.csv")
