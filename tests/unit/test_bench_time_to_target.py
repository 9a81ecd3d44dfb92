"""Time to target: the curve from a run's records, the target, first crossings, medians with misses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rollarc.bench.async_ import DEFAULT_SEEDS, modes, time_to_target
from rollarc.bench.time_to_target import first_crossing, median_time, select_target, speedup, spread, success_curve
from rollarc.config import load_train_config

REPO = Path(__file__).resolve().parents[2]


def test_curve_starts_at_zero_and_leaves_out_evaluation_time():
    summary = {
        "rl_window": [100.0, 160.0],
        "evals": [
            {"label": "before_rl", "version": 0, "success": 0.2, "episodes": 10, "seconds": 7.0},
            {"label": "step_2", "version": 2, "success": 0.3, "episodes": 10, "seconds": 5.0},
            {"label": "step_4", "version": 4, "success": 0.5, "episodes": 10, "seconds": 5.0},
            {"label": "after_rl", "version": 5, "success": 0.6, "episodes": 10, "seconds": 5.0},
        ],
    }
    rows = [{"step": v, "wall_s": w} for v, w in [(1, 110.0), (2, 120.0), (3, 135.0), (4, 145.0), (5, 160.0)]]
    # step 2 ends 20 s into RL; step 4 ends at 45 s, after 5 s of step-2 evaluation; step 5 at 60 - 10 s
    assert success_curve(summary, rows) == [(0.0, 0.2), (20.0, 0.3), (40.0, 0.5), (50.0, 0.6)]


def test_curve_skips_empty_evaluations():
    summary = {
        "rl_window": [0.0, 1.0],
        "evals": [{"label": "before_rl", "version": 0, "success": math.nan, "episodes": 0}],
    }
    assert success_curve(summary, []) == []


def test_target_is_a_fraction_of_the_lowest_synchronous_peak_gain():
    sync = [[(0.0, 0.2), (10.0, 0.6), (20.0, 0.5)], [(0.0, 0.2), (12.0, 0.4), (30.0, 0.7)]]
    assert select_target(0.2, sync, fraction=1.0) == pytest.approx(0.6)  # the lower peak: 0.6, not 0.7
    assert select_target(0.2, sync, fraction=0.5) == pytest.approx(0.4)
    for curve in sync:  # every synchronous seed reaches it
        assert first_crossing(curve, select_target(0.2, sync, fraction=1.0)) is not None


def test_no_target_when_synchronous_training_never_improved():
    assert select_target(0.5, [[(0.0, 0.5), (10.0, 0.4)]]) is None
    with pytest.raises(ValueError):
        select_target(0.5, [])


def test_first_crossing_is_the_first_time_at_or_above_the_target():
    curve = [(0.0, 0.1), (5.0, 0.3), (9.0, 0.29), (12.0, 0.5)]
    assert first_crossing(curve, 0.3) == 5.0
    assert first_crossing(curve, 0.4) == 12.0
    assert first_crossing(curve, 0.6) is None


def test_ratio_of_medians_and_misses_counted_as_infinite():
    assert median_time([10.0, 30.0, 20.0]) == 20.0
    assert speedup([20.0, 40.0], [10.0, 20.0]) == pytest.approx(2.0)  # medians 30 and 15
    assert median_time([10.0, None]) == math.inf
    assert speedup([20.0, 40.0], [10.0, None]) is None  # two seeds, one miss: the median run never got there
    assert speedup([20.0, 40.0, 30.0], [10.0, None, 15.0]) == pytest.approx(2.0)  # medians 30 and 15
    assert spread([3.0, 1.0, 2.0]) == [1.0, 3.0]
    assert spread([3.0, None]) == [3.0, None] and spread([None, None]) == [None, None]


def test_json_keys_report_a_mode_that_never_reaches_the_target_as_null():
    curves = {
        "sync": [[(0.0, 0.2), (10.0, 0.6)], [(0.0, 0.2), (20.0, 0.6)]],
        "async_k1": [[(0.0, 0.2), (5.0, 0.6)], [(0.0, 0.2), (10.0, 0.6)]],
        "async_k2": [[(0.0, 0.2), (5.0, 0.3)], [(0.0, 0.2), (6.0, 0.3)]],
    }
    out = time_to_target(0.2, curves, fraction=1.0)
    assert out["target_success"] == pytest.approx(0.6)
    assert out["time_to_target_s"] == {"sync": [10.0, 20.0], "async_k1": [5.0, 10.0], "async_k2": [None, None]}
    assert out["speedup_to_target_k1"] == pytest.approx(2.0)
    assert out["speedup_to_target_k2"] is None
    assert out["time_to_target_spread_s"]["async_k2"] == [None, None]


def test_modes_run_sync_then_each_k_and_monolithic_only_when_asked() -> None:

    assert [label for label, _ in modes([1, 2])] == ["sync", "async_k1", "async_k2", "monolithic"]
    assert [label for label, _ in modes([1, 2], monolithic=False)] == ["sync", "async_k1", "async_k2"]
    assert dict(modes([2]))["async_k2"] == ["async.mode=async", "async.max_staleness=2"]


def test_the_benchmark_recipe_runs_three_seeds_with_the_quickstarts_stabilisers():
    """Two seeds at a constant lr could not separate an effect of k from noise (docs/async.md#measured)."""
    assert DEFAULT_SEEDS == 3
    longtail = load_train_config(REPO / "configs/longtail.yaml", [])
    quickstart = load_train_config(REPO / "configs/quickstart.yaml", [])
    for key in ("lr", "warmup_steps", "lr_decay", "lr_min_ratio"):
        assert getattr(longtail.train, key) == getattr(quickstart.train, key), key
    assert longtail.algo.kl_coef == quickstart.algo.kl_coef > 0


def test_estimate_noise_is_two_standard_errors():
    from rollarc.bench.time_to_target import estimate_noise

    # p = 0.395 over 200 episodes: 2 * sqrt(0.395 * 0.605 / 200) = 2 * 0.034569... = 0.069134
    assert abs(estimate_noise(0.395, 200) - 0.0691339) < 1e-6
    assert estimate_noise(0.0, 50) == 0.0
    with pytest.raises(ValueError):
        estimate_noise(0.5, 0)
