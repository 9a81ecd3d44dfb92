"""``rollarc bench demo``'s bookkeeping: per-seed gains from run summaries, and the goal over all seeds."""

from __future__ import annotations

import pytest

from rollarc.bench.demo import aggregate, main, published_command, render, seed_result


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
