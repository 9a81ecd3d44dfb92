"""Retries are bounded: work that kills its EnvWorker on one seed, and a trainer lost on every step, stop the run
with one line naming the culprit after the configured number of retries, instead of looping forever.

Runs the real training entry in this process (its driver), on the tiny policy, in synchronous mode with one group
per step, so exactly one group is in flight when its EnvWorker dies.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, only_run

pytestmark = pytest.mark.slow

SMALL = {"steps": 3, "groups_per_step": 1, "group_size": 2, "eval_episodes": 1, "eval_every": 0, "checkpoint_every": 1}


def stopped_with(expected: str, runs: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The run printed one ``run stopped`` line starting with ``expected`` and wrote it as its stop reason."""
    stopped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rollarc: run stopped:")]
    assert len(stopped) == 1 and stopped[0].startswith(f"rollarc: run stopped: {expected}"), stopped
    summary = json.loads((only_run(runs) / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stop_reason"] == stopped[0].removeprefix(
        "rollarc: run stopped: "
    )
    return summary


def test_a_group_that_kills_its_env_worker_on_its_seed_stops_the_run_after_the_cap(nano_policy_dir, tmp_path, capsys):
    # group i plays env seed i (train.seed_base 0): group 1 kills its EnvWorker's process at its first env step
    cfg = config(
        nano_policy_dir, tmp_path, env_kwargs={"exit_on_seed": 1}, train=SMALL, **{"async": {"max_group_retries": 1}}
    )
    assert run_training(cfg) == 1
    expected = (
        "group 1 of task scripted (seed 1) killed its EnvWorker 2 times (async.max_group_retries=1); the env or a "
        "plugin crashes its process on this seed."
    )
    summary = stopped_with(expected, tmp_path, capsys)
    assert summary["steps"] == 1  # group 0 trained; group 1 ran twice and was not run a third time
    assert summary["retried_groups"] == 1 and summary["env_worker_restarts"] == 2


def test_held_out_episodes_that_kill_their_env_worker_stop_the_run_after_the_cap(nano_policy_dir, tmp_path, capsys):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"exit_on_seed": 1001},  # the second held-out episode (seeds eval_seed_base + i)
        train={**SMALL, "eval_episodes": 2, "eval_seed_base": 1000},
        **{"async": {"max_group_retries": 1}},
    )
    assert run_training(cfg) == 1
    expected = (
        "2 held-out episodes of task scripted (seeds 1000..1001) killed their EnvWorker 2 times "
        "(async.max_group_retries=1); the env or a plugin crashes its process on one of these seeds"
    )
    summary = stopped_with(expected, tmp_path, capsys)
    assert summary["stop_reason"] == expected and summary["steps"] == 0
    assert summary["retried_eval_chunks"] == 1 and summary["env_worker_restarts"] == 2


def _kill_trainers(runs: Path, kills: int, killed: list[str], stop: threading.Event) -> None:
    """Kill ``train-0`` once step 1 is logged, then each of the next ``kills - 1`` trainers as soon as it exists.

    The thread ends with its last kill: a Ray call from it while the run's driver shuts Ray down could crash the
    process."""
    deadline = time.monotonic() + 600
    while not stop.is_set() and time.monotonic() < deadline:
        rows = list(runs.glob("*/metrics.jsonl"))
        if rows and rows[0].read_text().strip():
            break
        time.sleep(0.05)
    serial = 0
    while serial < kills and not stop.is_set() and time.monotonic() < deadline:
        name = f"train-{serial}"
        try:
            ray.kill(ray.get_actor(name), no_restart=True)
        except ValueError:  # not started yet
            time.sleep(0.02)
            continue
        killed.append(name)
        serial += 1


def test_a_trainer_lost_on_every_step_stops_the_run_after_the_cap(nano_policy_dir, tmp_path, capsys):
    cfg = config(nano_policy_dir, tmp_path, train={**SMALL, "steps": 4, "max_trainer_restarts": 1})
    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_trainers, args=(tmp_path, 2, killed, stop), daemon=True)
    killer.start()
    try:
        assert run_training(cfg) == 1
    finally:
        stop.set()
        killer.join(timeout=5)
    assert killed == ["train-0", "train-1"]
    expected = (
        "the trainer was lost 2 times (train.max_trainer_restarts=1); it dies on every step (out of memory? see "
        "its log). Resume from "
    )
    summary = stopped_with(expected, tmp_path, capsys)
    assert summary["trainer_restarts"] == 1
