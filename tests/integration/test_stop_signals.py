"""Ctrl-C and SIGTERM stop ``rollarc train`` with one line, a clean run directory and a run that resumes.

Each run starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): the signals
are those a user's run gets, Ctrl-C reaching the whole process group, the Ray daemons the command started included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow


def write_config(policy: Path, runs: Path, path: Path) -> Path:
    data: dict[str, Any] = {
        "name": "stop",
        "model": {"path": str(policy)},
        "tasks": [
            {
                "name": "scripted",
                "env": {"entry_point": "runtime_plugins:ScriptedEnv", "kwargs": {"turns": 2, "reward_by_length": True}},
                "agent": {"max_turns": 4, "max_tokens_per_turn": 3, "history": "full", "context_limit": 200},
            }
        ],
        "engine": {"max_num_seqs": 16},
        "train": {
            "steps": 1000,  # never reached: the signal stops it
            "groups_per_step": 2,
            "group_size": 2,
            "eval_every": 0,
            "eval_episodes": 2,
            "checkpoint_every": 1,
        },
        "cluster": {
            "num_cpus": 2,
            "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        },
        "run": {"dir": str(runs), "progress": False, "tensorboard": False},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def rollarc(*args: str) -> subprocess.Popen[str]:
    # A session of its own, so that killpg reaches the whole process group, as Ctrl-C in a terminal does.
    return subprocess.Popen(
        [sys.executable, "-m", "rollarc.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_checkpoint(runs: Path, proc: subprocess.Popen[str], timeout_s: float = 300.0) -> Path:
    """The run directory once a step is logged and checkpointed (polling the files, not a fixed sleep).

    Any step's checkpoint counts, not only step 1's: with a checkpoint every step, retention
    (``train.keep_last_checkpoints``) deletes step 1's within a few steps, faster than a poll may see it
    (a fresh-clone run missed it and trained all 1,000 steps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rollarc train ended early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        for run in runs.glob("stop-*"):
            if (run / "metrics.jsonl").is_file() and list((run / "checkpoints").glob("step_*/state.json")):
                return run
        time.sleep(0.2)
    proc.kill()
    pytest.fail("no step was checkpointed in time")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_ends_train_cleanly_and_the_run_resumes(nano_policy_dir, tmp_path, signum, code):
    config = write_config(nano_policy_dir, tmp_path / "runs", tmp_path / "config.yaml")
    proc = rollarc("train", str(config))
    run = wait_for_checkpoint(tmp_path / "runs", proc)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole foreground process group
    else:
        # `kill PID` (a scheduler, a supervisor): only the driver. Sent to the whole group, it would also hit
        # the Ray daemons this test's session started, whose abrupt exit races with the driver's clean stop.
        os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=120)
    name = signal.Signals(signum).name

    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rollarc:")]
    assert len(lines) == 1, stderr
    summary = json.loads((run / "summary.json").read_text())
    saved = summary["last_checkpoint_step"]
    assert summary["stop_reason"] == name and saved >= 1
    assert lines[0] == (
        f"rollarc: stopped by {name}; saved step {saved} in {run / 'checkpoints' / f'step_{saved:06d}'}; "
        f"resume with: rollarc train {run / 'config.yaml'} resume={run}"
    )
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]

    if signum != signal.SIGINT:
        return  # resuming is the same after either signal; once is enough
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollarc.cli",
            "train",
            str(run / "config.yaml"),
            f"resume={run}",
            f"train.steps={saved + 1}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run} from step_{saved:06d}" in resumed.stderr
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, saved + 2))
    final = json.loads((run / "summary.json").read_text())
    assert final["steps"] == saved + 1 and final["status"] == "completed" and final["stop_reason"] is None
