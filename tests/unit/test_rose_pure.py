"""ROSE's pure parts against hand numbers: trace parsing, SLO scoring, the step-latency model, the SLO guard
(the routing decisions are tests/unit/test_dispatcher_capacity.py)."""

from __future__ import annotations

import math

import pytest

from rollarc.rose.guard import ServingState, judge
from rollarc.rose.latency_model import StepLatencyModel, StepShape, solve
from rollarc.rose.sites import bytes_per_hop, cross_site_bytes, plan_hops
from rollarc.rose.slo import RequestTiming, SLOConfig, attains, misses, overlap_s, percentile, summarize
from rollarc.rose.trace import TraceError, TraceRequest, parse_rows, read_trace, scale, synthetic_trace, write_trace

# ------------------------------------------------------------------ trace


def test_parse_rows_azure_timestamps_relative_and_sorted() -> None:
    rows = [
        ["2023-11-16 18:15:50.9951690", "396", "109"],
        ["2023-11-16 18:15:46.6805900", "374", "44"],
    ]
    trace = parse_rows(rows)
    assert trace[0] == TraceRequest(0.0, 374, 44)
    assert trace[1].prompt_tokens == 396 and trace[1].output_tokens == 109
    assert trace[1].arrival_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)


def test_read_trace_roundtrip_and_errors(tmp_path) -> None:
    trace = [TraceRequest(0.0, 10, 3), TraceRequest(0.5, 20, 4)]
    path = write_trace(tmp_path / "t.csv", trace)
    assert read_trace(path) == trace
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt,output\n1,2,3\n")
    with pytest.raises(TraceError, match="header"):
        read_trace(bad)
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1,abc,3\n")
    with pytest.raises(TraceError, match="row 2"):
        read_trace(bad)


def test_scale_compresses_time_and_lengths() -> None:
    trace = [TraceRequest(0.0, 1000, 100), TraceRequest(10.0, 3, 1), TraceRequest(30.0, 50, 50)]
    out = scale(trace, time_scale=10.0, token_scale=0.1, max_output_tokens=8, duration_s=2.0)
    assert out == [TraceRequest(0.0, 100, 8), TraceRequest(1.0, 1, 1)]
    with pytest.raises(TraceError):
        scale(trace, time_scale=0.0)


def test_synthetic_trace_is_seeded_and_bursts_raise_the_rate() -> None:
    a = synthetic_trace(200.0, 2.0, seed=3, burst_every_s=20.0, burst_len_s=5.0, burst_factor=5.0)
    assert a == synthetic_trace(200.0, 2.0, seed=3, burst_every_s=20.0, burst_len_s=5.0, burst_factor=5.0)
    inside = sum(1 for r in a if r.arrival_s % 20.0 < 5.0)
    outside = len(a) - inside
    # expected per 20 s period: 5 s x 10/s = 50 inside vs 15 s x 2/s = 30 outside
    assert inside == pytest.approx(500, rel=0.15) and outside == pytest.approx(300, rel=0.15)


# ------------------------------------------------------------------ SLO


def test_percentile_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert math.isnan(percentile([], 50))


def test_slo_attainment_by_hand() -> None:
    slo = SLOConfig(ttft_p99_ms=100.0, tpot_p99_ms=10.0)
    ok = RequestTiming(0.0, 0.05, 0.05 + 4 * 0.008, 5)  # ttft 50 ms, tpot 8 ms
    slow_first = RequestTiming(0.0, 0.2, 0.21, 2)  # ttft 200 ms
    slow_tokens = RequestTiming(0.0, 0.01, 0.01 + 0.02, 2)  # tpot 20 ms
    single = RequestTiming(0.0, 0.09, 0.09, 1)  # one token: no tpot
    assert ok.tpot_ms == pytest.approx(8.0)
    assert [attains(t, slo) for t in (ok, slow_first, slow_tokens, single)] == [True, False, False, True]
    summary = summarize([ok, slow_first, slow_tokens, single], slo)
    assert summary["slo_attainment"] == 0.5
    assert summary["slo_met"] == 0.0


def test_overlap_of_rollout_spans_by_hand() -> None:
    spans = [(0.0, 0.010), (0.020, 0.030), (0.050, 0.060)]
    assert overlap_s(spans, 0.005, 0.025) == pytest.approx(0.005 + 0.005)
    assert overlap_s(spans, 0.030, 0.050) == 0.0
    assert overlap_s(spans, -1.0, 1.0) == pytest.approx(0.030)


def test_misses_say_which_target_and_whether_rollout_time_explains_them() -> None:
    slo = SLOConfig(ttft_p99_ms=100.0, tpot_p99_ms=10.0)
    # ttft 150 ms of which 60 ms rollout: 90 ms without it, so the rollout time made it miss
    late_by_rollout = RequestTiming(0.0, 0.15, 0.15 + 4 * 0.008, 5, rollout_before_first_s=0.06)
    # tpot (0.1 - 0.01) / 3 = 30 ms of which 15 ms rollout over 3 gaps: (0.09 - 0.015) / 3 = 25 ms, still a miss
    slow_anyway = RequestTiming(0.0, 0.01, 0.1, 4, rollout_after_first_s=0.015)
    ok = RequestTiming(0.0, 0.05, 0.05 + 4 * 0.008, 5, rollout_before_first_s=0.04)
    report = misses([ok, late_by_rollout, slow_anyway], slo)
    assert (report["missed"], report["ttft"], report["tpot"], report["without_rollout"]) == (2, 1, 1, 1)
    assert report["detail"][0] == {
        "ttft_ms": 150.0,
        "tpot_ms": 8.0,
        "output_tokens": 5,
        "rollout_before_first_ms": 60.0,
        "rollout_after_first_ms": 0.0,
        "serving_before_first_ms": 0.0,
        "serving_after_first_ms": 0.0,
    }
    assert report["detail"][1]["tpot_ms"] == 30.0 and report["detail"][1]["rollout_after_first_ms"] == 15.0


# ------------------------------------------------------------------ latency model


def test_solve_small_system() -> None:
    assert solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0]) == pytest.approx([0.8, 1.4])


def test_latency_model_recovers_hand_coefficients() -> None:
    a, b, c, d = 0.002, 0.0005, 0.00001, 0.000001  # s per step, decode, prefill token, context token
    model = StepLatencyModel(decay=1.0)
    shapes = [StepShape(n, p, x) for n in (0, 1, 4, 9) for p in (0, 16, 100) for x in (0, 50, 400) if n or p]
    for shape in shapes:
        model.observe(shape, a + b * shape.decodes + c * shape.prefill_tokens + d * shape.context_tokens)
    assert model.coefficients() == pytest.approx([a, b, c, d], rel=1e-4)
    # a step of 8 decodes over 300 context tokens and 64 prefill tokens: 2 + 4 + 0.64 + 0.3 ms
    assert model.predict(StepShape(8, 64, 300)) == pytest.approx(0.00694, rel=1e-4)
    assert model.predict(StepShape()) == 0.0


def test_latency_model_is_pessimistic_before_fitting_and_forgets() -> None:
    model = StepLatencyModel(prior_s=0.05, min_samples=3, decay=0.5)
    assert model.predict(StepShape(decodes=8)) == pytest.approx(0.1)  # 0.05 * (1 + 8/8)
    for _ in range(20):
        model.observe(StepShape(decodes=2), 0.010)
    for _ in range(30):
        model.observe(StepShape(decodes=2), 0.030)  # the core got slower
    assert model.predict(StepShape(decodes=2)) == pytest.approx(0.030, rel=1e-3)


# ------------------------------------------------------------------ guard


def _linear(per_decode: float, per_prefill_token: float) -> StepLatencyModel:
    model = StepLatencyModel(decay=1.0, min_samples=1)
    for n, p in [(1, 0), (2, 0), (0, 10), (0, 20), (3, 30)]:
        model.observe(StepShape(n, p, 0), n * per_decode + p * per_prefill_token)
    return model


def test_guard_admits_within_slo_minus_margin_and_names_the_reason() -> None:
    serving = _linear(0.004, 0.0001)  # 4 ms per decode, 0.1 ms per prompt token
    rollout = _linear(0.002, 0.0001)
    busy = ServingState(
        running=2, context_tokens=0, waiting=0, waiting_prefill_tokens=0, oldest_wait_s=0.0, arrival_prefill_tokens=100
    )
    # serving step 8 ms; rollout step of 4 decodes 8 ms: 16 ms <= 0.8 * 20 ms
    verdict = judge(StepShape(4), busy, serving, rollout, ttft_ms=1000, tpot_ms=20, margin=0.2)
    assert verdict.admit and verdict.serving_s == pytest.approx(0.008) and verdict.rollout_s == pytest.approx(0.008)
    # one more decode: 8 + 10 = 18 ms > 16 ms
    assert judge(StepShape(5), busy, serving, rollout, 1000, 20, 0.2).reason == "tpot"
    waiting = ServingState(0, 0, waiting=1, waiting_prefill_tokens=100, oldest_wait_s=0.080, arrival_prefill_tokens=0)
    # 80 ms waited + rollout 8 ms + serving prefill (1 decode 4 ms + 10 ms) = 102 ms > 0.8 * 125 = 100 ms
    assert judge(StepShape(4), waiting, serving, rollout, 125, 1000, 0.2).reason == "ttft_waiting"
    assert judge(StepShape(3), waiting, serving, rollout, 125, 1000, 0.2).admit  # 80 + 6 + 14 = 100 ms
    idle = ServingState(0, 0, 0, 0, 0.0, arrival_prefill_tokens=500)
    # an arrival now: rollout 8 ms + (4 ms + 50 ms) = 62 ms > 0.5 * 100 ms
    assert judge(StepShape(4), idle, serving, rollout, 100, 1000, 0.5).reason == "ttft_arrival"
    assert judge(StepShape(4), idle, serving, rollout, 100, 1000, 0.3).admit


def test_guard_protects_a_request_whose_earlier_gaps_used_its_tpot_slack() -> None:
    serving = _linear(0.004, 0.0)
    rollout = _linear(0.002, 0.0)
    fresh = ServingState(1, 0, 0, 0, 0.0, 0, decoding=((0.010, 1),))  # 10 ms over 1 gap: 5 ms per gap so far
    late = ServingState(1, 0, 0, 0, 0.0, 0, decoding=((0.030, 1),))  # 30 ms over 1 gap: slow prefills ate slack
    # step 4 ms + rollout 4 ms = 8 ms <= 16 ms; mean gap (10 + 8) / 2 = 9 ms vs (30 + 8) / 2 = 19 ms > 16 ms
    assert judge(StepShape(2), fresh, serving, rollout, 1000, 20, 0.2).admit
    assert judge(StepShape(2), late, serving, rollout, 1000, 20, 0.2).reason == "tpot"


def test_guard_scales_both_serving_predictions_by_the_serving_scale() -> None:
    serving = _linear(0.004, 0.0001)
    rollout = _linear(0.002, 0.0001)
    busy = ServingState(2, 0, 0, 0, 0.0, arrival_prefill_tokens=0)
    # scale 1: 8 + 6 = 14 ms <= 16 ms; scale 1.5: 12 + 6 = 18 ms > 16 ms
    assert judge(StepShape(3), busy, serving, rollout, 1000, 20, 0.2).admit
    verdict = judge(StepShape(3), busy, serving, rollout, 1000, 20, 0.2, serving_scale=1.5)
    assert verdict.reason == "tpot" and verdict.serving_s == pytest.approx(0.012)
    idle = ServingState(0, 0, 0, 0, 0.0, arrival_prefill_tokens=500)
    # an arrival now: rollout 8 ms + (4 + 50) ms = 62 ms <= 0.7 * 100 ms; scaled by 1.2: 8 + 64.8 ms > 70 ms
    assert judge(StepShape(4), idle, serving, rollout, 100, 1000, 0.3).admit
    assert judge(StepShape(4), idle, serving, rollout, 100, 1000, 0.3, serving_scale=1.2).reason == "ttft_arrival"


# ------------------------------------------------------------------ cross-site hops


def test_one_delta_crosses_into_each_site_and_fans_out_inside() -> None:
    sites = {"train": ["ded0"], "serving": ["b0", "b1", "b2"]}
    hops = plan_hops(sites, "train", delta_bytes=100, full_bytes=10_000)
    # origin->ded0 stays in the training site; origin->b0 crosses once; b0 fans out to b1 and b2 (tree, fanout 2)
    assert bytes_per_hop(hops) == {"origin->ded0": 100, "origin->b0": 100, "b0->b1": 100, "b0->b2": 100}
    assert cross_site_bytes(hops) == 100  # vs 3 x 10_000 for full copies sent to every borrowed worker
    behind = plan_hops(sites, "train", 100, 10_000, behind=frozenset({"b0"}))
    assert bytes_per_hop(behind) == {"origin->ded0": 100, "origin->b1": 100, "b1->b2": 100, "origin->b0": 10_000}
    assert cross_site_bytes(behind) == 10_100 and [h.full for h in behind].count(True) == 1
