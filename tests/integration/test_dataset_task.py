"""Dataset tasks on a local Ray cluster: a TRL-style and a verl-style reward function each train a run unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.config import Config
from rollarc.config.io import validate
from rollarc.runtime.entry import run_training
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def write_rows(path: Path) -> None:
    rows = [
        {"prompt": f"{a}+{b}=", "data_source": "arith", "reward_model": {"ground_truth": str(a + b)}}
        for a in range(10, 16)
        for b in range(10, 14)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def config(policy: Path, data: Path, runs: Path, placement: str = "local") -> Config:
    def task(name: str, function: str) -> dict[str, Any]:
        return {
            "name": name,
            "dataset": {
                "path": str(data),
                "heldout_fraction": 0.25,
                "reward": [{"function": function}, {"function": "byo_rewards:length_trl", "weight": 0.1}],
                "reward_placement": placement,
            },
            "agent": {"max_turns": 1, "max_tokens_per_turn": 4, "context_limit": 64, "instructions": False},
        }

    return validate(
        Config,
        {
            "name": "ds",
            "model": {"path": str(policy)},
            "tasks": [
                task("trl", "rollarc.data.math_reward:accuracy"),
                task("verl", "rollarc.data.math_reward:compute_score"),
            ],
            "engine": {"max_num_seqs": 16, "prefix_cache_tokens": 0},
            "train": {
                "steps": 2,
                "groups_per_step": 2,
                "group_size": 2,
                "lr": 1e-3,
                "eval_every": 0,
                "eval_episodes": 6,
                "checkpoint_every": 0,
            },
            "cluster": {
                # the suite's shared cluster (tests/integration/shared_ray.py); a served reward starts Ray Serve,
                # whose detached controller would outlive the run there, so that run starts a cluster of its own
                "address": shared_ray.address() if placement == "local" else None,
                "num_cpus": 2,
                "pools": {"compute": {"count": 2}, "cpu": {"count": 2}, "reward": {"count": 4}},
                "roles": {
                    "train": {"pool": "compute"},
                    "rollout": {"pool": "compute"},
                    "env": {"pool": "cpu"},
                    "reward": {"pool": "reward", "replicas": 0},
                },
            },
            "run": {"dir": str(runs), "progress": False},
        },
    )


@pytest.mark.parametrize("placement", ["local", "serverless"])
def test_trl_and_verl_reward_functions_each_train_a_dataset_task(nano_policy_dir, tmp_path, placement):
    """Run in the env workers, or served by Ray Serve (``reward_placement: serverless``): the same run."""
    write_rows(tmp_path / "rows.jsonl")
    assert run_training(config(nano_policy_dir, tmp_path / "rows.jsonl", tmp_path / "runs", placement)) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["trajectories"] == 4 for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["heldout_episodes"] == 6 and summary["steps"] == 2
    assert 0.0 <= summary["heldout_success_before_rl"] <= 1.0 and 0.0 <= summary["heldout_success_after_rl"] <= 1.0
    assert summary["failed_trajectories"] == 0 and not summary["failure_reasons"]
    assert all(set(r["per_task"]) == {"trl", "verl"} for r in rows)  # one group of each task per step
    for r in rows:  # the weighted length bonus (0.1 x 0.1 per character) shows in every task's mean reward
        assert all(task["reward"] > 0.0 for task in r["per_task"].values())
