"""Dynamic sampling inside ``rollarc train``: groups with all-equal rewards are dropped, replaced and counted."""

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


def config(policy: Path, data: Path, runs: Path, when_exhausted: str) -> Config:
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10, 30)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task: dict[str, Any] = {
        "name": "flat",
        "dataset": {
            "path": str(data),
            "heldout_fraction": 0.25,
            # every answer scores None, i.e. reward 0: no group ever has a learning signal
            "reward": [{"function": "byo_rewards:not_applicable_trl"}],
        },
        "agent": {"max_turns": 1, "max_tokens_per_turn": 2, "context_limit": 64, "instructions": False},
    }
    return validate(
        Config,
        {
            "name": "ds",
            "model": {"path": str(policy)},
            "tasks": [task],
            "engine": {"max_num_seqs": 8, "prefix_cache_tokens": 0},
            "train": {
                "steps": 2,
                "groups_per_step": 1,
                "group_size": 2,
                "eval_every": 0,
                "eval_episodes": 2,
                "checkpoint_every": 0,
                "dynamic_sampling": {"enabled": True, "max_drops_per_step": 2, "when_exhausted": when_exhausted},
            },
            "cluster": {
                "address": shared_ray.address(),  # the suite's shared cluster (tests/integration/shared_ray.py)
                "num_cpus": 2,
                "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
                "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
            },
            "run": {"dir": str(runs), "progress": False, "tensorboard": False},
        },
    )


def test_groups_without_signal_are_dropped_up_to_the_cap_then_trained(nano_policy_dir, tmp_path):
    assert run_training(config(nano_policy_dir, tmp_path / "rows.jsonl", tmp_path / "runs", "train")) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # synchronous, B = 1: each step drops 2 groups (the cap), then trains the third as it is
    assert [(r["dropped_no_signal_groups"], r["kept_no_signal_groups"], r["groups_trained"]) for r in rows] == [
        (2, 1, 1),
        (4, 2, 2),
    ]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["groups_started"] == 6 and summary["dropped_no_signal_groups"] == 4
    assert summary["dropped_failed_groups"] == 0
    # every trained group had all-equal rewards: the run says RL had no signal to learn from
    assert summary["signal_groups_frac_mean"] == 0.0 and summary["finished_signal_share"] == 0.0
    before, after = summary["heldout_success_before_rl"], summary["heldout_success_after_rl"]
    assert summary["rl_gain_points"] == round(100.0 * (after - before), 2)


def test_stop_ends_the_run_with_one_line_naming_the_cap(nano_policy_dir, tmp_path, capsys):
    assert run_training(config(nano_policy_dir, tmp_path / "rows.jsonl", tmp_path / "runs", "stop")) == 1
    stopped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rollarc: run stopped:")]
    assert len(stopped) == 1
    assert stopped[0].startswith("rollarc: run stopped: 2 groups had all-equal rewards since the last batch")
    assert "group 2 of task 'flat'" in stopped[0] and "train.dynamic_sampling.when_exhausted is 'stop'" in stopped[0]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] == 0 and summary["dropped_no_signal_groups"] == 2
