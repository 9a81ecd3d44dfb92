"""End to end: RL training whose reward comes from the serverless judge (trained on first use)."""

from __future__ import annotations

import json

import pytest

from rollarc.rewards.judge import read_meta
from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow


def test_two_steps_with_a_serverless_reward_model(nano_policy_dir, tmp_path):
    judge = tmp_path / "judge"
    runs = tmp_path / "runs"
    reward = {
        "kind": "serverless",
        "model_path": str(judge),
        "weight": 0.5,
        "timeout_s": 60,
        "autoscaling": {"min_replicas": 0, "initial_replicas": 1, "max_replicas": 1},
        "train": {
            "episodes": 24,
            "steps": 5,
            "epsilons": [0.0, 1.0],
            "random_actions": ["D"],
            "judge": {"context_tokens": 32, "d_model": 16, "heads": 2, "layers": 1},
        },
    }
    assert run_training(config(nano_policy_dir, runs, reward=reward)) == 0
    assert read_meta(judge)["heldout"]["examples"] > 0  # the judge was trained before the run started
    run = only_run(runs)
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2] and all(r["trajectories"] == 4 for r in rows)
    spans = [json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines()]
    scored = {s["traj"] for s in spans if s["kind"] == "reward"}
    assert len(scored) >= 8  # every trained trajectory was scored by the service
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["failed_trajectories"] == 0
