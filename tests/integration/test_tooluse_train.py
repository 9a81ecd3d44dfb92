"""`rollarc train configs/tooluse.yaml`, shortened: the policy calls the sandboxed interpreter during RL.

Not a learning claim (docs/bring-your-own.md#a-task-that-learns-to-use-the-interpreter has the measured
one): a short SFT on the rows' Hermes demonstrations is enough for sampled replies to hold tool calls,
so the run's metrics count calls that the sandbox ran (calls more than errors) and the run completes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollarc.config import load_train_config
from rollarc.runtime.entry import run_training
from tests.integration import shared_ray

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_tooluse_demo_calls_the_sandbox_during_rl(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config names its data files relative to the repository
    cfg = load_train_config(
        ROOT / "configs" / "tooluse.yaml",
        [
            "sft.steps=60",
            "sft.episodes=64",
            "sft.batch_size=16",
            f"sft.checkpoint={tmp_path / 'sft'}",
            "train.steps=2",
            "train.groups_per_step=2",
            "train.group_size=4",
            "train.eval_every=0",
            "train.eval_episodes=4",
            "train.checkpoint_every=0",
            "train.dynamic_sampling.enabled=false",
            f"run.dir={tmp_path / 'runs'}",
            "run.progress=false",
            f"cluster.address={shared_ray.address()}",  # the suite's shared cluster (tests/integration/shared_ray.py)
        ],
    )
    assert run_training(cfg) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1, 2]
    calls = sum(r["tool_calls"] * r["trajectories"] for r in metrics)
    errors = sum(r["tool_errors"] * r["trajectories"] for r in metrics)
    assert calls > errors >= 0  # the policy called the tool, and at least one call ran in the sandbox
    summary = json.loads((run / "summary.json").read_text())
    assert summary["failed_trajectories"] == 0 and not summary["failure_reasons"]
