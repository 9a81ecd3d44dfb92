"""A trainer that hangs (alive, not dead) during `rollarc train` stops the run with one line and a summary.

When the first training group starts, the env plugin hands the TrainWorker a call that never returns
(``stop_trainer_plugins``), so the step queued behind it never comes back. Before the deadlines (``cluster.train_timeout_s``) the controller polled
that step forever; ``subprocess.run`` would time out here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import shared_ray

pytestmark = pytest.mark.slow

EVAL_SEED_BASE = 20_000_000  # train.eval_seed_base's default: held-out episodes do not stop the trainer


def write_config(tmp_path: Path, policy: Path) -> Path:
    task: dict[str, Any] = {
        "name": "stop",
        "env": {
            "entry_point": "stop_trainer_plugins:StopTrainerEnv",
            "kwargs": {"turns": 2, "marker": str(tmp_path / "trainer.hung"), "below_seed": EVAL_SEED_BASE},
        },
        "agent": {"max_turns": 2, "max_tokens_per_turn": 3, "context_limit": 200},
    }
    data: dict[str, Any] = {
        "name": "hung",
        "model": {"path": str(policy)},
        "tasks": [task],
        "engine": {"max_num_seqs": 8, "prefix_cache_tokens": 1024},
        "train": {"steps": 2, "groups_per_step": 1, "group_size": 2, "eval_episodes": 1, "eval_every": 0},
        "cluster": {
            "address": shared_ray.address(),  # the suite's shared cluster (tests/integration/shared_ray.py)
            "num_cpus": 2,
            "call_timeout_s": 5.0,
            "train_timeout_s": 10.0,
            "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        },
        "run": {"dir": str(tmp_path / "runs"), "progress": False, "tensorboard": False},
    }
    path = tmp_path / "hung.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_hung_trainer_stops_the_run_with_one_line_naming_it_and_a_summary(tmp_path, nano_policy_dir):
    config = write_config(tmp_path, nano_policy_dir)
    done = subprocess.run(
        [sys.executable, "-m", "rollarc.cli", "train", str(config)], capture_output=True, text=True, timeout=600
    )
    assert (tmp_path / "trainer.hung").exists(), done.stderr[-3000:]  # the trainer really was made to hang
    assert done.returncode == 1, done.stderr[-3000:]
    stopped = [line for line in done.stderr.splitlines() if line.startswith("rollarc: run stopped:")]
    expected = (
        "rollarc: run stopped: the trainer did not answer train_step of step 1 within 10 s: it is alive but hung "
        "(if it is only slow, raise cluster.train_timeout_s)"
    )
    assert stopped == [expected], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped"
    assert summary["stop_reason"] == expected.removeprefix("rollarc: run stopped: ")
    assert summary["steps"] == 0
