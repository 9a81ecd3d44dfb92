"""``rollarc bench demo``'s bookkeeping: per-seed gains from run summaries, and the goal over all seeds."""

from __future__ import annotations

import pytest

from rollarc.bench.demo import Goal, aggregate, goal_flags, main, published_command, render, seed_result, time_to_gain


def summary(before: float, after: float) -> dict:
    return {
        "status": "completed",
        "heldout_success_before_rl": before,
        "heldout_success_after_rl": after,
        "heldout_episodes": 200,
        "evals": [
            {"label": "before_rl", "version": 0, "success": before},
            {"label": "step_20", "version": 20, "success": 0.9},  # a peak that must not count
            {"label": "after_rl", "version": 40, "success": after},
        ],
        "rl_wall_s": 400.0,
        "sft": {"demo_s": 5.0, "train_s": 25.0},
    }


def test_the_gain_is_the_final_policys_never_the_peak():
    s = seed_result(0, summary(0.4, 0.62), wall_s=500.0, error=None)
    assert s["gain_final"] == pytest.approx(0.22)
    assert [c["step"] for c in s["curve"]] == [0, 20, 40] and s["curve"][1]["success"] == 0.9
    assert (s["sft_s"], s["wall_s"], s["error"]) == (30.0, 500.0, None)
    counted = seed_result(0, {**summary(0.4, 0.6), "groups_started": 90, "dropped_no_signal_groups": 40}, 1.0, None)
    assert (counted["groups_started"], counted["dropped_no_signal_groups"], counted["groups_trained"]) == (90, 40, None)


def test_min_median_and_goal_over_seeds():
    seeds = [
        seed_result(0, summary(0.40, 0.70), 600.0, None),  # +0.30
        seed_result(1, summary(0.45, 0.61), 880.0, None),  # +0.16
        seed_result(2, summary(0.40, 0.60), 700.0, None),  # +0.20
    ]
    result = aggregate(seeds)
    assert result["gain_final"] == pytest.approx([0.30, 0.16, 0.20])
    assert result["gain_final_min"] == pytest.approx(0.16)
    assert result["gain_final_median"] == pytest.approx(0.20)
    assert result["wall_s_max"] == 880.0 and result["goal_met"] is True
    assert "median +20.0 points, range +16.0 to +30.0" in render(result)
    slow = aggregate([*seeds[:2], seed_result(2, summary(0.40, 0.60), 901.0, None)])
    assert slow["goal_met"] is False


def test_a_failed_seed_has_no_gain_and_fails_the_goal():
    failed = seed_result(1, {"status": "stopped", "heldout_success_before_rl": 0.4}, 100.0, None)
    assert failed["gain_final"] is None and failed["error"] == "run stopped"
    crashed = seed_result(2, {}, 10.0, "exit code 1")
    result = aggregate([seed_result(0, summary(0.4, 0.7), 600.0, None), failed, crashed])
    assert result["gain_final"] == [pytest.approx(0.3), None, None]
    assert result["gain_final_min"] is None and result["goal_met"] is False
    assert "failed" in render(result)


def test_another_config_must_publish_under_its_own_name(capsys):
    with pytest.raises(SystemExit):
        main(["--config", "configs/rlvr.yaml"])  # would overwrite the quickstart's docs/benchmarks/demo.json
    assert "--publish-as" in capsys.readouterr().err


def test_the_published_command_is_the_one_that_ran_overrides_included():
    """Regression: demo_sync40 was published as plain ``--seeds 1`` although it ran ``train.steps=40``."""
    assert published_command(3, "configs/quickstart.yaml", "demo", []) == "rollarc bench demo"
    assert (
        published_command(1, "configs/quickstart.yaml", "demo_async40", ["train.steps=40", "async.mode=async"])
        == "rollarc bench demo --seeds 1 --config configs/quickstart.yaml --publish-as demo_async40 "
        "train.steps=40 async.mode=async"
    )


def timed_summary(before: float, at_10: float, at_20: float) -> dict:
    """Evaluations at steps 10 and 20 (each taking 5 s); steps end 100 s and 200 s after the RL start (t0 = 50)."""
    return {
        **summary(before, at_20),
        "rl_window": [50.0, 260.0],
        "evals": [
            {"label": "before_rl", "version": 0, "success": before, "episodes": 160},
            {"label": "step_10", "version": 10, "success": at_10, "episodes": 160, "seconds": 5.0},
            {"label": "after_rl", "version": 20, "success": at_20, "episodes": 160, "seconds": 5.0},
        ],
    }


ROWS = [{"step": 10, "wall_s": 150.0}, {"step": 20, "wall_s": 250.0}]


def test_time_to_gain_interpolates_between_the_evaluations_around_the_crossing():
    # Target 0.10 + 0.15 = 0.25. At t = 100 s: 0.20; at t = 200 - 5 (the first evaluation's time) = 195 s: 0.40.
    # Crossing at 100 + (0.25 - 0.20) / (0.40 - 0.20) * 95 = 123.75 s, between 100 and 195.
    got = time_to_gain(timed_summary(0.10, 0.20, 0.40), ROWS, 0.15)
    assert got["target"] == pytest.approx(0.25)
    assert got["time_to_target_s"] == pytest.approx(123.75)
    assert got["time_to_target_bounds_s"] == pytest.approx([100.0, 195.0])
    never = time_to_gain(timed_summary(0.10, 0.20, 0.24), ROWS, 0.15)
    assert never["time_to_target_s"] is None and never["target"] == pytest.approx(0.25)
    assert time_to_gain({"status": "failed"}, [], 0.15)["time_to_target_s"] is None


def test_a_median_goal_and_time_to_target_over_seeds():
    seeds = [
        {**seed_result(0, summary(0.10, 0.45), 500.0, None), "time_to_target_s": 120.0},  # +0.35
        {**seed_result(1, summary(0.20, 0.40), 550.0, None), "time_to_target_s": None},  # +0.20
        {**seed_result(2, summary(0.10, 0.38), 580.0, None), "time_to_target_s": 300.0},  # +0.28
    ]
    rlvr = Goal(gain_min=0.15, gain_median=0.25, wall_s=600.0)
    result = aggregate(seeds, rlvr, target_gain=0.15)
    assert result["gain_final_median"] == pytest.approx(0.28) and result["goal_met"] is True
    assert result["goal"] == {"gain_final_min": 0.15, "wall_s_max": 600.0, "gain_final_median": 0.25}
    # The median counts the seed that never reached the target as infinite: the middle of 120, 300, inf.
    assert result["time_to_target_median_s"] == 300.0 and result["reached_target"] == 2
    assert "120 s, not reached, 300 s; median 300 s" in render(result)
    assert aggregate(seeds, Goal(0.15, 0.30, 600.0))["goal_met"] is False  # median +0.28 < +0.30
    assert aggregate(seeds, Goal(0.15, 0.25, 560.0))["goal_met"] is False  # slowest seed 580 s
    assert "target_gain" not in aggregate(seeds)


def test_goal_flags_are_checked_and_recorded_in_the_published_command(capsys):
    with pytest.raises(SystemExit):
        main(["--config", "configs/rlvr.yaml", "--publish-as", "x", "--goal-median", "0"])
    assert "--goal-median must be > 0" in capsys.readouterr().err
    flags = goal_flags(Goal(0.15, 0.25, 600.0), 0.15)
    assert flags == ["--goal-median", "0.25", "--goal-wall-s", "600", "--target-gain", "0.15"]
    assert published_command(3, "configs/rlvr.yaml", "rlvr", [*flags, "train.steps=400"]) == (
        "rollarc bench demo --config configs/rlvr.yaml --publish-as rlvr --goal-median 0.25 --goal-wall-s 600 "
        "--target-gain 0.15 train.steps=400"
    )
    assert goal_flags(Goal(), None) == []
