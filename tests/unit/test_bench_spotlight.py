"""``rollarc bench spotlight``'s bookkeeping: curves from a run's evaluations, medians and spreads, step means."""

import pytest

from rollarc.bench.spotlight import (
    SPOT_COUNTERS,
    STEP_METRICS,
    analyse,
    cost_ratios,
    curves,
    device_seconds,
    markdown_body,
    spot_line,
    spot_overrides,
    step_means,
    summarise,
)
from rollarc.bench.time_to_target import first_crossing, select_target

EVALS = [
    {"step": 2, "reward": 0.40, "rl_wall_s": 3.0},
    {"step": 0, "reward": 0.50, "rl_wall_s": 0.0},
    {"step": 4, "reward": 0.60, "rl_wall_s": 6.5},
    {"step": 6, "reward": 0.70, "rl_wall_s": 9.0},
]


def test_curves_in_step_order_by_time_and_by_step():
    by_time, by_step = curves(EVALS)
    assert by_time == [(0.0, 0.5), (3.0, 0.4), (6.5, 0.6), (9.0, 0.7)]
    assert by_step == [(0.0, 0.5), (2.0, 0.4), (4.0, 0.6), (6.0, 0.7)]
    # the target sits at 0.8 of the lowest baseline gain: 0.5 + 0.8 * (0.7 - 0.5) = 0.66, reached at step 6
    target = select_target(0.5, [by_time], 0.8)
    assert target == pytest.approx(0.66)
    assert first_crossing(by_step, target) == 6.0


def test_summarise_counts_a_miss_as_infinite():
    assert summarise([2.0, 4.0]) == {"median": 3.0, "spread": [2.0, 4.0]}
    assert summarise([2.0, None, 4.0]) == {"median": 4.0, "spread": [2.0, None]}
    assert summarise([None, None, 4.0]) == {"median": None, "spread": [4.0, None]}


def test_step_means_skip_steps_without_the_metric():
    rows = [{"low_contrast_fraction": 0.5, "candidates_std": None}, {"low_contrast_fraction": 0.25}]
    out = step_means(rows)
    assert out["low_contrast_fraction"] == 0.375
    assert out["candidates_std"] is None


UNITS = {"baseline": 2.0, "explore": 3.0, "planner": 3.0}  # trainer + sampler, + the explorer when exploring


def run(rewards, seconds, explored=0):
    """A run summary: held-out rewards at steps 0, 2, 4, ... reached after ``seconds`` of RL."""
    evals = [
        {"step": 2 * i, "reward": r, "rl_wall_s": t} for i, (r, t) in enumerate(zip(rewards, seconds, strict=True))
    ]
    means = {k: None for k in STEP_METRICS}
    return {
        "evals": evals,
        "step_means": means,
        "explored_images": explored,
        "sampled_images": 100,
        "heldout_reward_after_rl": rewards[-1],
    }


def test_analyse_by_hand():
    results = {
        # peaks 0.70 and 0.60: target 0.5 + 0.8 * (0.60 - 0.5) = 0.58
        "baseline": [run([0.5, 0.55, 0.6, 0.7], [0, 10, 20, 30]), run([0.5, 0.52, 0.6, 0.59], [0, 12, 24, 36])],
        "explore": [run([0.5, 0.6, 0.6, 0.6], [0, 15, 30, 45], 300), run([0.5, 0.5, 0.5, 0.5], [0, 15, 30, 45], 300)],
    }
    out = analyse(results, 0.8, {"baseline": 2.0, "explore": 2.5}, UNITS)
    assert out["target_heldout_reward"] == pytest.approx(0.58)
    assert out["time_to_target_s"] == {"baseline": [20.0, 24.0], "explore": [15.0, None]}
    assert out["steps_to_target"] == {"baseline": [4.0, 4.0], "explore": [2.0, None]}
    # explore's median over [15, inf] is infinite: no speed-up is made up
    assert out["speedup_explore"] is None and out["speedup_steps_explore"] is None
    assert out["time_to_target_summary"]["baseline"] == {"median": 22.0, "spread": [20.0, 24.0]}
    assert out["cost_to_target_usd"]["baseline"] == pytest.approx(22.0 / 3600 * 2.0)
    assert out["cost_to_target_usd"]["explore"] is None and out["cost_ratio"] == {"explore": None}
    assert out["explored_per_trained_image"] == {"baseline": 0.0, "explore": 3.0}
    results["explore"][1] = run([0.5, 0.59, 0.6, 0.6], [0, 5, 10, 15], 300)
    out = analyse(results, 0.8, {"baseline": 2.0, "explore": 2.5}, UNITS)
    # medians: baseline 22 s and 4 steps, explore (15 + 5) / 2 = 10 s and 2 steps
    assert out["speedup_explore"] == pytest.approx(2.2) and out["speedup_steps_explore"] == pytest.approx(2.0)
    assert out["cost_ratio"]["explore"] == pytest.approx((22.0 * 2.0) / (10.0 * 2.5))
    # the keys: wall speed-up as speedup_explore; device-seconds 22 · 2 = 44 and 10 · 3 = 30
    assert out["speedup_wall_explore"] == pytest.approx(2.2)
    assert out["device_seconds_to_target"] == pytest.approx({"baseline": 44.0, "explore": 30.0})
    assert out["cost_ratio_explore"] == pytest.approx(30.0 / 44.0)


def test_device_seconds_and_cost_ratios_by_hand():
    assert device_seconds(10.0, 3.0) == 30.0 and device_seconds(None, 3.0) is None
    ratios = cost_ratios({"baseline": 40.0, "explore": 30.0, "planner": None})
    assert ratios == {"cost_ratio_explore": 0.75, "cost_ratio_planner": None}
    assert cost_ratios({"baseline": None, "explore": 30.0}) == {"cost_ratio_explore": None}


def test_analyse_reports_the_planner_keys_over_three_seeds():
    base = [
        run([0.5, 0.55, 0.6, 0.7], [0, 10, 20, 30]),
        run([0.5, 0.52, 0.6, 0.59], [0, 12, 24, 36]),
        run([0.5, 0.6, 0.6, 0.6], [0, 9, 18, 27]),
    ]  # peaks .70, .60, .60: target 0.58; times 20, 24, 9 -> median 20; steps 4, 4, 2 -> median 4
    explore = [run([0.5, 0.6, 0.6, 0.6], [0, 8, 16, 24], 300)] * 3  # 8 s, 2 steps each
    planner = [
        run([0.5, 0.5, 0.6, 0.6], [0, 5, 10, 15], 300),
        run([0.5, 0.6, 0.6, 0.6], [0, 5, 10, 15], 300),
        run([0.5, 0.5, 0.5, 0.6], [0, 5, 10, 15], 300),
    ]  # 10, 5, 15 s -> median 10; 4, 2, 6 steps -> median 4
    out = analyse(
        {"baseline": base, "explore": explore, "planner": planner},
        0.8,
        {"baseline": 2.0, "explore": 2.5, "planner": 2.5},
        UNITS,
    )
    assert out["steps_to_target"]["planner"] == [4.0, 2.0, 6.0]
    assert out["speedup_wall_explore"] == pytest.approx(20 / 8) and out["speedup_wall_planner"] == pytest.approx(2.0)
    assert out["speedup_steps_explore"] == pytest.approx(2.0) and out["speedup_steps_planner"] == pytest.approx(1.0)
    # device-seconds: baseline 20 · 2 = 40, explore 8 · 3 = 24, planner 10 · 3 = 30
    assert out["cost_ratio_explore"] == pytest.approx(0.6) and out["cost_ratio_planner"] == pytest.approx(0.75)


def test_markdown_body_with_and_without_a_target():
    reached = {
        "baseline": [run([0.5, 0.55, 0.6, 0.7], [0, 10, 20, 30]), run([0.5, 0.52, 0.6, 0.59], [0, 12, 24, 36])],
        "explore": [run([0.5, 0.6, 0.6, 0.6], [0, 15, 30, 45], 300), run([0.5, 0.59, 0.6, 0.6], [0, 5, 10, 15], 300)],
    }
    out = analyse(reached, 0.8, {"baseline": 2.0, "explore": 2.5}, UNITS)
    out["kendall_tau"] = {"1": 0.8}
    body = markdown_body(out)
    assert "| explore | [15.0, 5.0] | [2.0, 2.0] | 2.2 | 2 |" in body
    assert "target 0.580 (0.8 of the baseline's lowest peak gain)" in body and '{"1": 0.8}' in body
    flat = {m: [run([0.5, 0.5], [0, 10]), run([0.5, 0.4], [0, 10])] for m in ("baseline", "explore")}
    body = markdown_body(analyse(flat, 0.8, {"baseline": 2.0, "explore": 2.5}, UNITS))
    assert "target none (the baseline never improved)" in body
    assert "| explore | [null, null] | [null, null] | n/a | n/a | n/a | 0 |" in body


def test_the_exploring_modes_run_on_the_spot_fleet_and_its_counters_are_kept_per_seed():
    assert spot_overrides(None) == []
    assert spot_overrides("t.yaml") == ["spot.enabled=true", "spot.trace=t.yaml", "spot.target=busy"]
    # the fleet never preempted: no trace and no drawn preemption
    assert spot_overrides("none") == [
        "spot.enabled=true",
        "spot.trace=null",
        "spot.rate_per_hour=0",
        "spot.target=busy",
    ]
    counters = [
        dict.fromkeys(SPOT_COUNTERS, 0) | {"preemptions": p, "committed_on_notice": c} for p, c in ((4, 1), (3, 0))
    ]
    results = {
        "baseline": [run([0.5, 0.6], [0, 10]), run([0.5, 0.6], [0, 12])],
        "explore": [run([0.5, 0.6], [0, 5], 300) | {"spot": s} for s in counters],
    }
    out = analyse(results, 0.8, {"baseline": 2.0, "explore": 2.5}, UNITS)
    assert set(out["spot"]) == {"explore"}  # the baseline explores nothing: no fleet
    assert out["spot"]["explore"]["preemptions"] == [4, 3]
    assert out["spot"]["explore"]["committed_on_notice"] == [1, 0]
    assert out["spot"]["explore"]["lost_jobs"] == [0, 0]


def test_the_block_says_where_the_explorer_ran_and_what_preemption_cost():
    result = {"explorer_path": "spot fleet (pull workers, Ray drains)", "spot_trace": "t.yaml"}
    result["spot"] = {"explore": {"preemptions": [4, 3], "lost_jobs": [0, 0]}}
    assert spot_line(result) == (
        "\n\nExplorer: spot fleet (pull workers, Ray drains) under t.yaml. "
        "Per seed: explore: preemptions [4, 3], lost_jobs [0, 0]."
    )
    assert spot_line({}) == ""  # a result from before the fleet
