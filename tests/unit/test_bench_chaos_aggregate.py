"""The chaos benchmark's verdict over seeds, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from rollarc.bench import chaos


def _seed(seed: int, p_chaos: float, p_clean: float, steps_lost: int = 0) -> dict:
    summary = {
        "steps": 30,
        "trainer_restarts": 1,
        "steps_lost": steps_lost,
        "trajectories": {"started": 100, "failed": 5, "cancelled": 3, "retried": 2, "lost": 0},
        "failure_reasons": {"env_step_injected": 4, "trajectory_timeout": 1},
        "env_workers": [{"name": "env-1", "injected_failures": 40}, {"name": "env-2", "injected_failures": 3}],
    }
    run = {"crashed": False, "error": None, "summary": summary}
    clean = {"crashed": False, "error": None, "summary": {"steps": 30}}
    heldout = ({"episodes": 200, "success": p_clean}, {"episodes": 200, "success": p_chaos})
    return {"seed": seed, **chaos.compare(clean, run, [], heldout)}


def test_two_seeds_gap_is_the_mean_and_noise_the_larger_of_eval_and_seed_spread():
    result = chaos.aggregate([_seed(0, 0.5, 0.55), _seed(1, 0.6, 0.65, steps_lost=1)])
    assert result["heldout_success_chaos"] == pytest.approx(0.55)
    assert result["heldout_success_clean"] == pytest.approx(0.60)
    assert result["success_gap"] == pytest.approx(-0.05)
    # per-seed binomial variances of the gap: (0.25 + 0.2475) / 200 and (0.24 + 0.2275) / 200;
    # the mean gap's eval SE is sqrt(sum) / 2 = 0.03473; Welch's seed SE: sqrt(0.005 / 2 + 0.005 / 2) = 0.07071
    assert result["noise_2se"] == pytest.approx(2 * math.sqrt(0.005), rel=1e-9)
    assert result["within_noise"] is True
    assert result["trajectories_started"] == 200 and result["trajectories_lost"] == 0
    assert result["failure_reasons"] == {"env_step_injected": 8, "trajectory_timeout": 2}
    assert result["env_step_failures_injected"] == 86
    assert result["steps_lost"] == 1 and result["trainer_losses"] == 2
    assert result["steps_lost_per_trainer_loss"] == 1.0


def test_one_seed_falls_back_to_the_evaluation_noise():
    result = chaos.aggregate([_seed(0, 0.45, 0.62)])
    expected = 2 * math.sqrt((0.45 * 0.55 + 0.62 * 0.38) / 200)
    assert result["noise_2se"] == pytest.approx(expected)
    assert result["success_gap"] == pytest.approx(-0.17)
    assert result["within_noise"] is False


def test_a_crashed_seed_makes_the_benchmark_crashed():
    crashed = _seed(1, 0.5, 0.5)
    crashed["crashed"], crashed["error"] = True, "exit code 1"
    result = chaos.aggregate([_seed(0, 0.5, 0.5), crashed])
    assert result["crashed"] is True and result["error"] == "exit code 1"


def test_without_a_clean_run_every_clean_figure_is_null_and_the_chaos_ones_stay():
    """``--quick`` runs the chaos run alone (``chaos.NO_CLEAN_RUN``): nothing about a clean run is made up."""
    chaos_side = _seed(0, 0.5, 0.5)  # for its run's summary
    run = {"crashed": False, "error": None, "summary": {"steps": 30, "trainer_restarts": 1, "rl_wall_s": 12.0}}
    row = {"seed": 0, **chaos.compare(chaos.NO_CLEAN_RUN, run, [], (None, {"episodes": 4, "success": 0.25}))}
    assert (row["heldout_success_clean"], row["success_gap"], row["noise_2se"], row["within_noise"]) == (None,) * 4
    assert row["clean_crashed"] is None and row["rl_wall_s"] == {"clean": None, "chaos": 12.0}
    assert row["heldout_success_chaos"] == 0.25 and row["trainer_losses"] == 1 and row["crashed"] is False
    result = chaos.aggregate([row])
    assert result["clean_crashed"] is None and result["success_gap"] is None and result["heldout_success_clean"] is None
    assert chaos.aggregate([row, chaos_side])["clean_crashed"] is False  # a seed that had its clean run decides
