"""``rollarc bench rose`` derives its SLO from the serving-alone run and counts the guard's actions per load."""

from __future__ import annotations

import pytest

from rollarc.bench.rose import _actions, derived_slo, load_window, serving_step_ratio
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
    slo = derived_slo(RoseConfig(), run)
    assert slo.ttft_p99_ms == pytest.approx(1.5 * 11.0)
    assert slo.tpot_p99_ms == pytest.approx(1.5 * 2.0)
    configured = RoseConfig.model_validate({"slo_alone_factor": 0, "slo": {"ttft_p99_ms": 7, "tpot_p99_ms": 3}})
    assert derived_slo(configured, run) == configured.slo


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
