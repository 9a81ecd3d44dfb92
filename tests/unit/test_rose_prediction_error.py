"""The guard's error factor: a high quantile of recent actual / predicted ratios, never below 1, checked by hand;
and the guard budgeting with it."""

from __future__ import annotations

import pytest

from rollarc.rose.guard import ServingState, judge
from rollarc.rose.latency_model import StepLatencyModel, StepShape
from rollarc.rose.prediction_error import PredictionError


def test_the_factor_is_the_nearest_rank_quantile_of_recent_ratios_and_never_below_one() -> None:
    err = PredictionError(quantile=0.95, window=20, min_samples=4)
    for _ in range(3):
        err.observe(0.010, 0.030)
    assert err.factor() == 1.0  # 3 ratios: too few to trust
    for _ in range(16):
        err.observe(0.010, 0.010)
    # 19 ratios: three 3.0 and sixteen 1.0; rank ceil(0.95 * 19) = 19 -> the largest, 3.0
    assert err.factor() == pytest.approx(3.0)
    err.observe(0.010, 0.005)  # 20 ratios: rank ceil(19.0) = 19 of 20 -> still 3.0 (sorted: 0.5, 1 x16, 3 x3)
    assert err.factor() == pytest.approx(3.0)
    for _ in range(3):
        err.observe(0.010, 0.010)  # the window (20) drops the three 3.0 ratios
    assert err.factor() == 1.0
    pessimistic = PredictionError(min_samples=1)
    pessimistic.observe(0.010, 0.002)
    assert pessimistic.factor() == 1.0  # a model that over-predicts keeps its margin
    off = PredictionError(quantile=0.0, min_samples=1)
    off.observe(0.010, 0.050)
    assert off.factor() == 1.0


def test_degenerate_observations_are_skipped_and_bad_settings_refused() -> None:
    err = PredictionError(min_samples=1)
    err.observe(0.0, 0.010)  # a step predicted to cost nothing has no ratio
    err.observe(0.010, float("nan"))
    assert err.factor() == 1.0
    with pytest.raises(ValueError, match="quantile"):
        PredictionError(quantile=1.0)
    with pytest.raises(ValueError, match="window"):
        PredictionError(window=0)


def _linear(per_decode: float) -> StepLatencyModel:
    model = StepLatencyModel(min_samples=2)
    for n in (1, 2, 3):
        model.observe(StepShape(n), n * per_decode)
    return model


def test_the_guard_budgets_each_role_at_its_error_factor() -> None:
    serving, rollout = _linear(0.004), _linear(0.002)
    busy = ServingState(2, 0, 0, 0, 0.0, arrival_prefill_tokens=0)
    # serving 8 ms + rollout 4 decodes 8 ms = 16 ms <= 0.8 * 20 ms: admitted at factor 1
    assert judge(StepShape(4), busy, serving, rollout, 1000, 20, 0.2).admit
    # rollout steps recently ran 1.25x their prediction: 8 + 10 = 18 ms > 16 ms
    verdict = judge(StepShape(4), busy, serving, rollout, 1000, 20, 0.2, rollout_error=1.25)
    assert verdict.reason == "tpot" and verdict.rollout_s == pytest.approx(0.010)
    # serving's own steps ran 1.25x theirs: 10 + 8 = 18 ms > 16 ms
    verdict = judge(StepShape(4), busy, serving, rollout, 1000, 20, 0.2, serving_error=1.25)
    assert verdict.reason == "tpot" and verdict.serving_s == pytest.approx(0.010)
    assert judge(StepShape(3), busy, serving, rollout, 1000, 20, 0.2, rollout_error=1.25).admit  # 8 + 7.5 ms
