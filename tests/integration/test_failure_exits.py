"""A hung env never keeps `rollarc eval` or `rollarc train` from exiting, and a stopped run explains itself.

Each test runs the real CLI in a subprocess with a generous timeout: before the fix, `eval` printed its
JSON and then waited forever for the thread stuck in ``env.step``, so ``subprocess.run`` would time out.
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

HANGING_TASK = {
    "name": "hang",
    "env": {
        "entry_point": "runtime_plugins:ScriptedEnv",
        "kwargs": {"turns": 2, "hang_on_seed_mod": 1, "hang_s": 3600.0},  # every step hangs for an hour
    },
    "agent": {"max_turns": 2, "max_tokens_per_turn": 3, "context_limit": 200},
    "step_timeout_s": 0.5,
}


# the trainer and the rollout replica on one pool, the env workers on another
CLUSTER: dict[str, Any] = {
    "num_cpus": 2,
    "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
    "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
}


def joined(**keys: Any) -> dict[str, Any]:
    """``CLUSTER`` joining the suite's shared cluster (tests/integration/shared_ray.py): each `rollarc train` below
    is a driver of its own that joins and leaves it, and Ray ends its job's actors, a hung one included."""
    return {**CLUSTER, "address": shared_ray.address(), **keys}


TWO_STEPS = {"steps": 2, "groups_per_step": 1, "group_size": 2, "eval_every": 0}


def write_config(tmp_path: Path, policy: Path, **sections: Any) -> Path:
    data: dict[str, Any] = {
        "name": "hang",
        "model": {"path": str(policy)},
        "tasks": [HANGING_TASK],
        "engine": {"max_num_seqs": 8, "prefix_cache_tokens": 1024},
        "run": {"dir": str(tmp_path / "runs"), "progress": False, "tensorboard": False},
        **sections,
    }
    path = tmp_path / "hang.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def rollarc(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollarc.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_eval_exits_with_its_result_when_every_env_step_hangs(tmp_path, nano_policy_dir):
    done = rollarc("eval", str(write_config(tmp_path, nano_policy_dir)), "--episodes", "2", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 2 and result["failed"] == 2 and result["success"] == 0.0


def test_train_stops_with_a_summary_naming_the_kind_when_every_env_step_hangs(tmp_path, nano_policy_dir):
    config = write_config(
        tmp_path,
        nano_policy_dir,
        train={**TWO_STEPS, "eval_episodes": 1},
        cluster=joined(),
    )
    done = rollarc("train", str(config), timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    stopped = [line for line in done.stderr.splitlines() if line.startswith("rollarc: run stopped:")]
    assert len(stopped) == 1, done.stderr[-3000:]
    # The kind, its count and one whole message, not "env step 0 (32)".
    # async.max_failed_fraction (0.5) over the last B x G = 2 finished trajectories stops the run
    assert "more than async.max_failed_fraction=0.5 allows; reasons: env_step_timeout (" in stopped[0]
    assert "e.g. 'env step 0: timed out after 0.5 s in step'" in stopped[0]
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stop_reason"] in stopped[0]
    assert set(summary["failure_reasons"]) == {"env_step_timeout"}
    assert summary["failure_reasons"]["env_step_timeout"] == summary["failed_trajectories"] >= 2
    assert summary["failure_examples"]["env_step_timeout"] == ["env step 0: timed out after 0.5 s in step"]
    assert summary["steps"] == 0


def test_train_stops_naming_the_worker_once_its_stuck_env_threads_reach_the_cap(tmp_path, nano_policy_dir):
    """Stuck threads cannot be killed: at async.max_stuck_env_threads the run stops instead of piling them up."""
    config = write_config(
        tmp_path,
        nano_policy_dir,
        train={**TWO_STEPS, "eval_episodes": 1},
        **{"async": {"max_stuck_env_threads": 2, "max_failed_fraction": 1.0}},  # the failure window never stops it
        cluster=joined(),
    )
    done = rollarc("train", str(config), timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    stopped = [line for line in done.stderr.splitlines() if line.startswith("rollarc: run stopped:")]
    assert len(stopped) == 1, done.stderr[-3000:]
    # the held-out evaluation before RL hung one thread, the group's two rollouts one each (both started below the cap)
    assert (
        "env-0 has 3 env threads stuck in env code past step_timeout_s (async.max_stuck_env_threads=2)" in (stopped[0])
    )
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] == 0


def test_an_env_worker_whose_event_loop_hangs_stops_the_run_naming_it_and_the_group(tmp_path, nano_policy_dir):
    """An inline env step that never returns blocks the EnvWorker's whole event loop, so even the trajectory timeout
    cannot fire there: the controller's group deadline (trajectory timeout + call deadline) ends the run."""
    task = {**HANGING_TASK, "inline_env_steps": True}
    config = write_config(
        tmp_path,
        nano_policy_dir,
        tasks=[task],
        train={**TWO_STEPS, "eval_episodes": 0},
        **{"async": {"trajectory_timeout_s": 2.0}},
        cluster=joined(call_timeout_s=5.0),
    )
    done = rollarc("train", str(config), timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    stopped = [line for line in done.stderr.splitlines() if line.startswith("rollarc: run stopped:")]
    assert stopped == [
        "rollarc: run stopped: EnvWorker env-0 did not answer run_group of group 0 (task hang, seed 0) within 7 s: "
        "it is alive but hung (if it is only slow, raise async.trajectory_timeout_s + cluster.call_timeout_s)"
    ], done.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] == 0
