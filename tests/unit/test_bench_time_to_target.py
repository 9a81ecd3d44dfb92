"""Time to target: the curve from a run's records, the target, first crossings, medians with misses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rollarc.bench.async_ import DEFAULT_SEEDS
from rollarc.bench.async_modes import (
    mode_setup,
    modes,
    no_correction,
    no_latency,
    quick_overrides,
    whole_machine,
    workload,
)
from rollarc.bench.async_target import time_to_target
from rollarc.bench.time_to_target import (
    Crossing,
    Ratio,
    crossing,
    eval_pause_gain,
    eval_steps,
    first_crossing,
    grid_error,
    median_time,
    pauses,
    ratio_with_bounds,
    select_target,
    speedup,
    spread,
    strongest,
    success_curve,
)
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
    assert eval_steps(summary, rows) == [0, 2, 4, 5]


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


def _runs(curves: dict[str, list[list[tuple[float, float]]]]) -> dict[str, list[dict]]:
    """Seeded runs as time_to_target reads them: each point's step is its index times 10."""
    return {m: [{"curve": c, "steps": [10 * i for i in range(len(c))]} for c in of] for m, of in curves.items()}


def test_json_keys_report_a_mode_that_never_reaches_the_target_as_null():
    curves = {
        "sync": [[(0.0, 0.2), (10.0, 0.6)], [(0.0, 0.2), (20.0, 0.6)]],
        "async_k1": [[(0.0, 0.2), (5.0, 0.6)], [(0.0, 0.2), (10.0, 0.6)]],
        "async_k2": [[(0.0, 0.2), (5.0, 0.3)], [(0.0, 0.2), (6.0, 0.3)]],
    }
    out = time_to_target(_runs(curves), 0.6, "--target, fixed before the runs")
    assert out["target"] == 0.6 and out["target_source"] == "--target, fixed before the runs"
    # exactly at the target: the interpolation lands on the evaluation itself
    assert out["time_to_target_s"] == {"sync": [10.0, 20.0], "async_k1": [5.0, 10.0], "async_k2": [None, None]}
    assert out["steps_to_target"] == {"sync": [10, 10], "async_k1": [10, 10], "async_k2": [None, None]}
    assert out["time_to_target_bounds_s"]["sync"] == [[0.0, 10.0], [0.0, 20.0]]
    assert out["baseline_mode"] == "sync" and out["sync_modes"] == ["sync"]
    assert out["speedup_to_target_k1"] == pytest.approx(2.0)  # medians 15 and 7.5
    assert out["speedup_to_target_k2"] is None and out["speedup_to_target_k2_bounds"] is None
    assert out["time_to_target_spread_s"]["async_k2"] == [None, None]
    # k = 1's bounds start at 0 s: its crossing may be at any time after the start, so the ratio is unbounded
    assert out["speedup_to_target_k1_bounds"] == [pytest.approx(0.0), None]
    assert out["grid_error"] is None and out["grid_error_over_limit"] is True


def test_the_baseline_is_the_synchronous_mode_with_the_least_median_time_and_every_ratio_has_bounds():
    # success +0.1 per 10 s after 10 s in sync_full, per 20 s in sync; target 0.55 between evaluations
    sync = [(0.0, 0.2), (40.0, 0.4), (60.0, 0.5), (80.0, 0.6)]
    full = [(0.0, 0.2), (20.0, 0.4), (30.0, 0.5), (40.0, 0.6)]
    k2 = [(0.0, 0.2), (10.0, 0.4), (15.0, 0.5), (20.0, 0.6)]
    out = time_to_target(_runs({"sync": [sync], "sync_full": [full], "async_k2": [k2]}), 0.55, "test")
    # sync 60 + 0.5 * 20 = 70 in [60, 80]; sync_full 35 in [30, 40]; k = 2 17.5 in [15, 20]
    assert out["time_to_target_s"] == {
        "sync": [pytest.approx(70.0)],
        "sync_full": [pytest.approx(35.0)],
        "async_k2": [pytest.approx(17.5)],
    }
    assert out["steps_to_target"] == {"sync": [30], "sync_full": [30], "async_k2": [30]}
    assert out["baseline_mode"] == "sync_full"
    assert out["speedup_to_target_k2"] == pytest.approx(2.0)
    assert out["speedup_to_target_k2_bounds"] == [pytest.approx(30 / 20), pytest.approx(40 / 15)]
    assert out["speedup_to_target_k1"] is None  # no k = 1 ran
    assert out["baseline_speedups"] == {
        "sync": {"sync_full": pytest.approx(2.0), "async_k2": pytest.approx(4.0)},
        "sync_full": {"sync": pytest.approx(0.5), "async_k2": pytest.approx(2.0)},
    }
    assert out["speedup_to_target"] == out["baseline_speedups"]["sync_full"]
    # every ratio here is 7/12 wide, relative: sync over k = 2, say, is in [60/20, 80/15] around 4: (16/3 - 3) / 4
    assert out["grid_error"] == pytest.approx(7 / 12)
    assert out["grid_error_over_limit"] is True


def test_no_target_gives_null_times_and_no_baseline():
    out = time_to_target(_runs({"sync": [[(0.0, 0.2)]], "async_k2": [[(0.0, 0.2)]]}), None, "")
    assert out["time_to_target_s"] == {"sync": [None], "async_k2": [None]}
    assert out["baseline_mode"] is None and out["speedup_to_target_k2"] is None
    assert out["grid_error"] is None and out["grid_error_over_limit"] is False


def test_crossing_interpolates_between_the_evaluations_around_it():
    curve = [(0.0, 0.2), (10.0, 0.3), (30.0, 0.7), (40.0, 0.9)]
    c = crossing(curve, 0.4)  # 10 + (0.4 - 0.3) / (0.7 - 0.3) * 20 = 15, between the evaluations at 10 and 30 s
    assert (c.t, c.lo, c.hi, c.index) == (pytest.approx(15.0), 10.0, 30.0, 2)
    assert crossing(curve, 0.95) is None  # never crosses
    c = crossing(curve, 0.7)  # exactly equal to the target at 30 s: that evaluation's time, not an earlier one
    assert (c.t, c.lo, c.hi, c.index) == (30.0, 10.0, 30.0, 2)
    c = crossing(curve, 0.1)  # at or above it from the first evaluation: no earlier time to interpolate from
    assert (c.t, c.lo, c.hi, c.index) == (0.0, 0.0, 0.0, 0)
    c = crossing([(5.0, 0.5), (9.0, 0.6)], 0.5)  # crosses at the first evaluation, after the start
    assert (c.t, c.lo, c.hi) == (5.0, 5.0, 5.0)
    # a dip after the crossing does not move it; the last evaluation below is the one just before
    c = crossing([(0.0, 0.2), (10.0, 0.5), (20.0, 0.1), (30.0, 0.8)], 0.45)
    assert (c.t, c.lo, c.hi) == (pytest.approx(10 * 0.25 / 0.3), 0.0, 10.0)


def test_a_ratio_carries_the_median_bounds_of_each_side():
    # base times 70, 90, 80 in [60, 80], [80, 100], [70, 90]; other 30, 50, None in [20, 40], [40, 60], never
    base = [Crossing(70.0, 60.0, 80.0, 1), Crossing(90.0, 80.0, 100.0, 1), Crossing(80.0, 70.0, 90.0, 1)]
    other = [Crossing(30.0, 20.0, 40.0, 1), Crossing(50.0, 40.0, 60.0, 1), None]
    r = ratio_with_bounds(base, other)
    # medians: base 80 (lo 70, hi 90); other 50 (lo 40, hi 60; the miss counts as infinite in each)
    assert r == Ratio(80.0 / 50.0, 70.0 / 60.0, 90.0 / 40.0)
    assert r.relative_width == pytest.approx((90 / 40 - 70 / 60) / 1.6)
    assert ratio_with_bounds(base, [None, None, other[0]]) is None  # other's median seed never reached it
    assert grid_error([r, Ratio(2.0, 1.9, 2.1)]) == pytest.approx(r.relative_width)
    assert grid_error([r, Ratio(2.0, 1.0, None)]) is None and grid_error([]) is None


def test_strongest_is_the_least_median_and_none_when_no_median_reached():
    a, b = Crossing(10.0, 5.0, 10.0, 1), Crossing(20.0, 10.0, 20.0, 1)
    assert strongest({"sync": [b, b, a], "sync_full": [a, a, None]}) == "sync_full"  # medians 20 and 10
    assert strongest({"sync": [a, None, None], "monolithic": [None]}) is None
    assert strongest({"sync": [a], "sync_full": [a]}) == "sync"  # a tie: the first listed


def test_modes_run_sync_then_each_k_and_monolithic_only_when_asked() -> None:
    assert [label for label, _ in modes([1, 2])] == ["sync", "sync_full", "async_k1", "async_k2", "monolithic"]
    assert [label for label, _ in modes([1, 2], monolithic=False, split_sync=False)] == [
        "sync_full",
        "async_k1",
        "async_k2",
    ]
    assert dict(modes([2]))["async_k2"] == ["async.mode=async", "async.max_staleness=2"]


def test_sync_full_gives_each_phase_every_core_and_no_correction_and_monolithic_keeps_tis():
    cfg = load_train_config(REPO / "configs/longtail.yaml", [])
    listed = dict(modes([2], whole=whole_machine(cfg), uncorrected=no_correction(cfg)))
    full = load_train_config(REPO / "configs/longtail.yaml", listed["sync_full"])
    mono = load_train_config(REPO / "configs/longtail.yaml", listed["monolithic"])
    split = load_train_config(REPO / "configs/longtail.yaml", listed["sync"])
    assert cfg.cluster.pools["compute"].count == 2
    assert mode_setup(full) == {
        "async": "sync",
        "max_staleness": 0,
        "in_flight_update": "finish",
        "correction": "none",
        "threads": {"train": 2, "rollout": [2]},
    }
    assert mode_setup(mono)["threads"] == {"train": 2, "rollout": [2]} and mono.algo.correction == "tis"
    assert mode_setup(split)["threads"] == {"train": 1, "rollout": [1]} and split.algo.correction == "tis"
    # a config that sets the correction's own cap gets it reset, so correction none is accepted
    capped = load_train_config(REPO / "configs/longtail.yaml", ["algo.tis_cap=3"])
    assert no_correction(capped) == ["algo.correction=none", "algo.tis_cap=2.0"]
    assert (
        load_train_config(REPO / "configs/longtail.yaml", ["algo.tis_cap=3", *no_correction(capped)]).algo.tis_cap
        == 2.0
    )


def test_no_latency_turns_every_tasks_env_latency_off():
    cfg = load_train_config(REPO / "configs/longtail.yaml", [])
    off = load_train_config(REPO / "configs/longtail.yaml", no_latency(cfg))
    assert cfg.tasks[0].latency.kind == "lognormal"
    assert off.tasks[0].latency.kind == "none" and off.tasks[0].latency.failure_prob == 0.0
    assert workload("configs/longtail.yaml", off, True)["tail"].startswith("frozen_lake: no env latency")
    assert workload("configs/longtail.yaml", off, True)["env_latency"] is False
    described = workload(str(REPO / "configs/longtail.yaml"), cfg, False)
    # lognormal median 0.1 s, sigma ln(25) / z_0.99: p99 = 2.5 s
    assert "median 0.1 s, p99 2.5 s, 2% of steps fail; up to 20 turns of up to 1 tokens" in described["tail"]
    assert described["env_latency"] is True
    assert described["name"] == "longtail" and described["about"].startswith("A long-tail agentic workload")


def test_quick_shrinks_only_what_each_task_has():
    cfg = load_train_config(REPO / "configs/longtail.yaml", [])
    quick = quick_overrides(cfg)
    assert "tasks.0.latency.median_s=0.02" in quick and "tasks.0.env.kwargs.size=4" in quick
    load_train_config(REPO / "configs/longtail.yaml", quick)  # a valid config
    off = load_train_config(REPO / "configs/longtail.yaml", no_latency(cfg))
    assert not any("latency" in o for o in quick_overrides(off))  # no latency to shrink: nothing set on it


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


def test_eval_pause_gain_compares_the_step_after_an_evaluation_with_the_others():
    # steps end at 10, 20, 45, 55, 80, 90 s; evaluations of 15 s after steps 2 and 4
    summary = {
        "evals": [
            {"label": "before_rl", "version": 0, "seconds": 99.0},
            {"label": "step_2", "version": 2, "seconds": 15.0},
            {"label": "step_4", "version": 4, "seconds": 15.0},
            {"label": "after_rl", "version": 6, "seconds": 99.0},
        ]
    }
    rows = [{"step": v, "wall_s": w} for v, w in [(1, 10.0), (2, 20.0), (3, 45.0), (4, 55.0), (5, 80.0), (6, 90.0)]]
    # after an evaluation: steps 3 and 5 took 25 - 15 = 10 s; the others (2, 4, 6) 10 s: no gain
    assert eval_pause_gain(summary, rows) == 0.0
    rows[2] = {"step": 3, "wall_s": 42.0}  # step 3 took 22 - 15 = 7 s, step 4 13 s: medians 10 (2, 4, 6) and 8.5
    assert eval_pause_gain(summary, rows) == pytest.approx(10.0 - 8.5)
    assert eval_pause_gain({"evals": []}, rows) is None  # no evaluation during RL


def test_a_deferred_evaluation_pauses_the_run_where_it_is_scored_not_at_its_step():
    summary = {
        "rl_window": [100.0, 160.0],
        "evals": [
            {"label": "before_rl", "version": 0, "success": 0.2, "episodes": 10, "seconds": 7.0},
            # scored at the checkpoint after step 3 (8 s of scoring, both), and at the run's end (no pause)
            {"label": "step_1", "version": 1, "success": 0.3, "episodes": 10, "seconds": 4.0, "scored_at": 3},
            {"label": "step_2", "version": 2, "success": 0.4, "episodes": 10, "seconds": 4.0, "scored_at": 3},
            {"label": "step_4", "version": 4, "success": 0.5, "episodes": 10, "seconds": 4.0, "scored_at": 5},
            {"label": "after_rl", "version": 5, "success": 0.6, "episodes": 10, "seconds": 5.0},
        ],
    }
    assert pauses(summary) == {3: 8.0}
    rows = [{"step": v, "wall_s": w} for v, w in [(1, 110.0), (2, 120.0), (3, 130.0), (4, 148.0), (5, 160.0)]]
    # steps 1 and 2 end 10 and 20 s into RL, nothing paused yet; step 4 ends at 48 s less the 8 s paused after 3
    assert success_curve(summary, rows) == [(0.0, 0.2), (10.0, 0.3), (20.0, 0.4), (40.0, 0.5), (52.0, 0.6)]
    assert eval_pause_gain(summary, rows) == pytest.approx(10.0 - 10.0)  # step 4 took 18 - 8 s, as the others
