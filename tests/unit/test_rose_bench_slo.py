"""``rollarc bench rose`` derives its SLO from the serving-alone run and counts the guard's actions per load."""

from __future__ import annotations

import pytest

from rollarc.bench.rose import _actions, derived_slo, docs_body, load_window, pool_repeats, serving_step_ratio
from rollarc.rose.config import RoseConfig
from rollarc.rose.slo import RequestTiming
from rollarc.rose.trace import TraceRequest
from rollarc.runtime.rose_setup import SetupResult


def alone(ttft_ms: list[float], tpot_ms: float, tokens: int = 5) -> SetupResult:
    timings = [
        RequestTiming(float(i), i + t / 1000, i + t / 1000 + (tokens - 1) * tpot_ms / 1000, tokens)
        for i, t in enumerate(ttft_ms)
    ]
    return SetupResult("alone", 1.0, 0, 0, 1, timings, {}, {}, {}, {})


def test_slo_is_the_factor_times_the_alone_p99s() -> None:
    run = alone([10.0] * 99 + [110.0], tpot_ms=2.0)  # p99 of the TTFTs: 10 + 0.01 * 100 = 11 ms
    slo = derived_slo(RoseConfig(), [run])
    assert slo.ttft_p99_ms == pytest.approx(1.5 * 11.0)
    assert slo.tpot_p99_ms == pytest.approx(1.5 * 2.0)
    configured = RoseConfig.model_validate({"slo_alone_factor": 0, "slo": {"ttft_p99_ms": 7, "tpot_p99_ms": 3}})
    assert derived_slo(configured, [run]) == configured.slo


def test_with_several_alone_runs_the_slo_comes_from_their_requests_pooled() -> None:
    # 50 + 50 TTFTs: 99 of 10 ms and one of 110 ms. Pooled p99 (numpy's linear): 10 + 0.01 * 100 = 11 ms; the p99
    # of the run holding the slow request alone would be 10 + 0.51 * 100 = 61 ms
    quick, slow = alone([10.0] * 50, tpot_ms=2.0), alone([10.0] * 49 + [110.0], tpot_ms=4.0)
    slo = derived_slo(RoseConfig(), [quick, slow])
    assert slo.ttft_p99_ms == pytest.approx(1.5 * 11.0)
    assert slo.tpot_p99_ms == pytest.approx(1.5 * 4.0)  # every TPOT of the slow run is 4 ms: above its p99 place
    assert derived_slo(RoseConfig(), [slow]).ttft_p99_ms == pytest.approx(1.5 * 61.0)


def test_guard_actions_sum_pauses_preemptions_and_withdrawals() -> None:
    assert _actions({"guard_actions": {"pauses": 3, "preemptions": 1, "withdrawals": 2}}) == 6
    assert _actions({"guard_actions": {"pauses": 0, "preemptions": 0, "withdrawals": 0}}) == 0


def test_every_load_point_replays_the_trace_from_the_same_moment() -> None:
    """Regression: the offset was taken in each load point's own scaled time, so a heavier point replayed a
    later part of the trace (and past its end, an empty window after the lighter points had run)."""
    trace = [TraceRequest(float(t), 10 + t, 5) for t in range(0, 100)]  # one request per second, 100 s
    rose = RoseConfig.model_validate(
        {"replay": {"time_scale": 1.0, "token_scale": 1.0, "offset_s": 60.0, "duration_s": 10.0}}
    )
    base = load_window(rose, trace, 1.0)
    heavy = load_window(rose, trace, 2.0)
    assert [r.prompt_tokens - 10 for r in base] == list(range(60, 71))  # original seconds 60..70
    assert [r.prompt_tokens - 10 for r in heavy] == list(range(60, 81))  # 60..80, compressed into 10 s
    assert heavy[0].arrival_s == 0.0 and heavy[-1].arrival_s == 10.0
    with pytest.raises(ValueError, match="no requests in the trace window"):
        load_window(rose.model_copy(update={"replay": rose.replay.model_copy(update={"offset_s": 200.0})}), trace, 1.0)


def test_serving_step_ratio_is_measured_over_predicted_per_predecessor() -> None:
    counters = {
        "serving_after_rollout_us": 6000,
        "serving_after_rollout_predicted_us": 4000,
        "serving_after_serving_us": 0,
        "serving_after_serving_predicted_us": 0,
    }
    assert serving_step_ratio(counters) == {"rollout": 1.5, "serving": None}


def _repeat(speedup: float, missed_alone: int, missed_harvest: int, without_rollout: int = 0) -> dict:
    return {
        "speedup_harvest": speedup,
        "requests": 59,
        "guard_actions": {"pauses": 2, "preemptions": 1, "withdrawals": 0},
        "slo_misses": {
            "alone": {"missed": missed_alone, "without_rollout": missed_alone},
            "dedicated": {"missed": 2, "without_rollout": 2},  # reported beside the goal, not part of it
            "harvest": {"missed": missed_harvest, "without_rollout": without_rollout},
        },
    }


def test_repeats_give_the_median_speedup_its_spread_and_the_attainment_pooled_over_every_request() -> None:
    pooled = pool_repeats([_repeat(1.2, 0, 1, 1), _repeat(1.5, 0, 0), _repeat(1.4, 1, 2)])
    assert pooled["speedup_harvest"] == 1.4 and pooled["speedup_harvest_spread"] == [1.2, 1.5]
    assert pooled["requests"] == 177
    assert pooled["slo_attainment_alone"] == pytest.approx(1 - 1 / 177)
    assert pooled["slo_attainment_coserving"] == pytest.approx(1 - 3 / 177)
    assert [run["misses_coserving"] for run in pooled["runs"]] == [1, 0, 2]
    assert [run["misses_coserving_without_rollout"] for run in pooled["runs"]] == [1, 0, 0]
    assert pooled["slo_attainment_dedicated_setup"] == pytest.approx(1 - 6 / 177)


def test_one_repeat_is_that_runs_own_figures() -> None:
    pooled = pool_repeats([_repeat(1.32, 0, 1)])
    assert pooled["speedup_harvest"] == 1.32 and pooled["speedup_harvest_spread"] == [1.32, 1.32]
    assert pooled["slo_attainment_alone"] == 1.0 and pooled["slo_attainment_coserving"] == pytest.approx(58 / 59)


def test_the_published_block_lists_every_repeat_and_the_pooled_attainment() -> None:
    keys = [
        "time_scale",
        "requests_per_s",
        "rollout_traj_s_dedicated",
        "rollout_traj_s_harvest",
        "speedup_harvest",
        "speedup_within_run",
        "slo_attainment_alone",
        "slo_attainment_coserving",
        "ttft_p99_ms_alone",
        "ttft_p99_ms_coserving",
        "preemptions",
        "pauses",
        "withdrawals",
    ]
    curve = [dict.fromkeys(keys, 1.0)]
    result = {
        "slo": {"ttft_p99_ms": 81.0, "tpot_p99_ms": 13.6, "source": "1.5 x serving-alone p99 at time scale 1"},
        "cross_site_bytes_per_step": 3.2e6,
        "in_site_bytes_per_step": 3.2e6,
        "full_copy_bytes": 6.4e6,
        "cross_site_bytes_ratio_modelled": 0.04,
        "repeats": pool_repeats([_repeat(1.2, 0, 1), _repeat(1.5, 0, 0), _repeat(1.4, 1, 2)]),
    }
    body = docs_body(result, curve)
    assert "speed-ups 1.20x, 1.50x, 1.40x (median 1.40x)" in body
    assert (
        "serving misses alone 0, 0, 1, in the dedicated set-up (nothing lent) 2, 2, 2, co-serving 1, 0, 2 of 59" in body
    )
    assert "pooled over the 177 requests: 0.994 alone, 0.966 dedicated set-up, 0.983 co-serving" in body
    result["repeats"] = pool_repeats([_repeat(1.2, 0, 1)])
    assert "runs:" not in docs_body(result, curve)
