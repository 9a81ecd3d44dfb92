"""A dataset task whose rows call the sandboxed Python tool trains on a local Ray cluster (not a learning claim)."""

from __future__ import annotations

import json

import pytest

from rollarc.config import Config
from rollarc.config.io import validate
from rollarc.runtime.entry import run_training
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def test_rows_with_the_python_tool_run_tool_turns_in_the_env_workers(nano_policy_dir, tmp_path):
    rows = [
        {"prompt": f"{a}*{b}=", "reward_model": {"ground_truth": str(a * b)}, "tools": ["python"]}
        for a in range(2, 6)
        for b in range(2, 6)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = {
        "name": "py",
        "dataset": {
            "path": str(tmp_path / "rows.jsonl"),
            "heldout_fraction": 0.25,
            "reward": [{"function": "rollarc.data.math_reward:compute_score"}],
            "template_plain_prompts": True,
            "tool_column": "tools",
            # every reply of the untrained policy is read as one call (tests/plugins/byo_tools.py)
            "tool_format": "byo_tools:every_reply_runs_python",
            "tools": {"python": {"function": "rollarc.data.sandbox:python", "kwargs": {"wall_s": 5, "session": True}}},
            "max_tool_calls": 1,
        },
        "agent": {"max_turns": 2, "max_tokens_per_turn": 4, "context_limit": 128, "instructions": False},
    }
    cfg = validate(
        Config,
        {
            "name": "tools",
            "model": {"path": str(nano_policy_dir)},
            "tasks": [task],
            "engine": {"max_num_seqs": 16, "prefix_cache_tokens": 0},
            "train": {
                "steps": 2,
                "groups_per_step": 2,
                "group_size": 2,
                "lr": 1e-3,
                "eval_every": 0,
                "eval_episodes": 4,
                "checkpoint_every": 0,
            },
            "cluster": {
                "address": shared_ray.address(),  # the suite's shared cluster (tests/integration/shared_ray.py)
                "num_cpus": 2,
                "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
                "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
            },
            "run": {"dir": str(tmp_path / "runs"), "progress": False},
        },
    )
    assert run_training(cfg) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1, 2]
    # every trajectory: one tool turn (the sandbox ran and answered), then the answer the reward scores
    assert all((r["trajectories"], r["turns"], r["invalid_actions"]) == (4, 2.0, 0.0) for r in metrics)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["failed_trajectories"] == 0 and not summary["failure_reasons"]
