"""A rollout replica whose engine loop died (its actor lives on) is replaced like a dead actor, and no trajectory is
lost: its turns fail over, and the controller's heal kills it and starts a replacement (``rollout_restarts``).

The engine is killed for real: its loop thread is handed a weight update that is not a mapping of tensors, and dies
of the ``TypeError`` as it would of any bug (``AsyncLLMEngine._run``); the actor itself is untouched.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import ray

from rollarc.engine.types import SamplingParams
from rollarc.runtime.controller import Controller
from rollarc.runtime.ray_cluster import start_ray, stop_ray
from rollarc.runtime.workers import Workers
from tests.integration.test_runtime import config

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def kill_engine(handle: Any) -> None:
    """Make the replica's engine loop die; the actor answers on."""

    def poison(worker: Any) -> None:
        worker.engine.update_weights_nowait(42, -1)  # not iterable: the loop thread raises TypeError and ends
        worker.engine._thread.join(timeout=30)

    ray.get(handle.__ray_call__.remote(poison), timeout=60)


def test_heal_replaces_a_replica_whose_engine_died_and_its_turns_fail_over(nano_policy_dir, tmp_path):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        cluster={"roles": {"rollout": {"pool": "compute", "replicas": 2}, "train": {"pool": "compute", "units": 0}}},
    )
    start_ray(cfg.cluster)
    try:
        w = Workers(cfg, str(nano_policy_dir))
        kill_engine(w.rollout["rollout-0"])
        assert ray.get(w.rollout["rollout-0"].stats.remote(), timeout=60)["name"] == "rollout-0"  # the actor lives
        turns = ray.get([w.router.generate.remote([3, 40, 5, 4], GREEDY, f"k{i}") for i in range(4)], timeout=120)
        assert [t.finish_reason for t in turns] == ["length"] * 4
        stats = ray.get(w.router.routing_stats.remote(), timeout=60)
        assert stats["dead_replicas"] == ["rollout-0"] and set(stats["replica_turns"]) == {"rollout-1"}
        assert w.heal(0) == {"router": 0, "rollout": 1}
        (new,) = set(w.rollout) - {"rollout-1"}
        assert w.rollout_restarts == 1 and new.startswith("rollout-0.")  # a new name: names are never reused
        assert sorted(ray.get(w.router.alive.remote(), timeout=60)) == sorted([new, "rollout-1"])
        assert ray.get(w.rollout[new].ping.remote(), timeout=60) == new
    finally:
        stop_ray()


def test_a_run_whose_only_replica_loses_its_engine_finishes_with_no_trajectory_lost(nano_policy_dir, tmp_path):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        train={"steps": 4, "groups_per_step": 2, "group_size": 2, "checkpoint_every": 0, "eval_episodes": 2},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    start_ray(cfg.cluster)
    killed: list[str] = []

    def killer(workers: Workers) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if (run_dir / "metrics.jsonl").is_file() and (run_dir / "metrics.jsonl").read_text().strip():
                kill_engine(workers.rollout["rollout-0"])
                killed.append("rollout-0")
                return
            time.sleep(0.02)

    try:
        workers = Workers(cfg, str(nano_policy_dir))
        thread = threading.Thread(target=killer, args=(workers,), daemon=True)
        thread.start()
        summary = Controller(cfg, run_dir, workers).run()
        thread.join(timeout=5)
    finally:
        stop_ray()
    assert killed == ["rollout-0"]
    assert summary["steps"] == 4 and summary["groups_trained"] == 8
    assert summary["rollout_restarts"] == 1 and summary["routing"]["dead_replicas"] == ["rollout-0"]
    trajectories = summary["trajectories"]
    assert trajectories["lost"] == 0 and trajectories["failed"] == 0 and summary["failed_trajectories"] == 0
