"""Asynchronous training on local Ray: the staleness bound holds, workers can die, memory stays flat."""

from __future__ import annotations

import json
import threading
import time

import pytest
import ray
import torch

from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow


def test_a_fifty_step_async_run_respects_the_bound_and_keeps_buffer_and_memory_flat(nano_policy_dir, tmp_path):
    """One long asynchronous run (k = 2, replies continue across a weight update, decoupled PPO) for the staleness
    bound on every step and flat buffers and memory over fifty steps (two runs before, one Ray run fewer)."""
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        **{"async": {"mode": "async", "max_staleness": 2, "in_flight_update": "continue"}},
        train={"steps": 50, "groups_per_step": 2, "group_size": 2, "checkpoint_every": 0},
        algo={"correction": "decoupled_ppo"},
    )
    assert run_training(cfg) == 0
    run = only_run(tmp_path)
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 51))
    for row in rows:  # no trained token is older than k (a group's older tokens, if any, are masked and counted)
        assert 0 <= row["token_staleness_min"] <= row["token_staleness_max"] <= 2
        assert 0 <= row["masked_token_frac"] < 1 and row["masked_stale_tokens"] >= 0
        assert all(int(k) >= 0 for k in row["staleness_hist"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["max_buffer_groups"] <= summary["max_in_flight_groups_bound"] == 6
    assert max(r["buffer_groups"] + r["in_flight_groups"] for r in rows) <= 6  # (k + 1) * B
    early = sum(r["rss_mb"] for r in rows[5:15]) / 10
    late = sum(r["rss_mb"] for r in rows[-10:]) / 10
    assert late < early * 1.10 + 20, (early, late)
    for role in ("rss_mb_train", "rss_mb_rollout", "rss_mb_env"):
        first = sum(r[role] for r in rows[5:15]) / 10
        last = sum(r[role] for r in rows[-10:]) / 10
        assert last < first * 1.10 + 20, (role, first, last)


def test_an_abort_run_records_what_it_trained_next_to_what_it_admitted(nano_policy_dir, tmp_path):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        **{"async": {"mode": "async", "max_staleness": 1, "in_flight_update": "abort"}},
        train={"steps": 4, "groups_per_step": 2, "group_size": 2, "checkpoint_every": 0},
    )
    assert run_training(cfg) == 0
    rows = metrics(only_run(tmp_path))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    admitted = trained = 0
    for row in rows:
        # every generated token of the batch, by its own staleness (one segment per trajectory: full history)
        assert sum(row["token_staleness_hist"]) == row["generated_tokens"]
        assert len(row["token_staleness_hist"]) == row["staleness_max"] + 1
        assert row["trained_groups_step"] == 2 and row["trained_trajectories"] == row["trajectories"] == 4
        assert row["trained_success"] == row["success"] and row["trained_by_task"] == {"scripted": 2}
        assert 0 <= row["resumed_turns"] <= row["resumed_tokens"]  # a resumed turn kept at least one token
        admitted += row["admitted_groups_step"]
        trained += row["trained_groups_step"]
        assert admitted >= trained  # a group is counted admitted when its rollouts end, before any batch takes it
        assert row["cancelled_groups_step"] == 0 and row["cancelled_success"] is None


def test_killing_an_env_worker_mid_run_is_survived_and_counted(nano_policy_dir, tmp_path):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        cluster={"roles": {"env": {"pool": "cpu", "replicas": 2}}},
        train={"steps": 8, "checkpoint_every": 0},
    )
    cfg = cfg.model_copy(
        update={
            "tasks": [
                cfg.tasks[0].model_copy(
                    update={"latency": cfg.tasks[0].latency.model_copy(update={"kind": "fixed", "fixed_s": 0.1})}
                )
            ]
        }
    )
    killed: list[str] = []

    def killer() -> None:
        deadline = time.time() + 300
        while time.time() < deadline:
            runs = [p for p in tmp_path.iterdir() if p.is_dir()] if tmp_path.exists() else []
            if runs and (runs[0] / "metrics.jsonl").exists() and (runs[0] / "metrics.jsonl").read_text().strip():
                try:
                    ray.kill(ray.get_actor("env-0"))
                    killed.append("env-0")
                except ValueError as err:  # not found: report it through the assertion below
                    killed.append(f"error: {err}")
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    assert run_training(cfg) == 0
    thread.join(timeout=5)
    assert killed == ["env-0"]
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["steps"] == 8
    assert summary["env_worker_restarts"] >= 1 and summary["retried_groups"] >= 1


def test_elastic_schedule_adds_a_replica_with_the_current_weights_and_removes_one(nano_policy_dir, tmp_path):
    """The config's schedule, read by the controller: a replica joins after step 1 holding the trainer's weights
    bitwise (regression: it served the start weights labelled as the current version), one leaves after step 2."""
    from rollarc.models import load_policy
    from rollarc.runtime.controller import Controller
    from rollarc.runtime.ray_cluster import start_ray, stop_ray
    from rollarc.runtime.workers import Workers

    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        cluster={"pools": {"compute": {"count": 3}, "cpu": {"count": 2}}},
        train={
            "steps": 3,
            "checkpoint_every": 0,
            "eval_episodes": 2,
            "weight_decay": 0.1,
        },  # decay: step 1 moves every weight
        elastic=[{"at_step": 1, "add": 1}, {"at_step": 2, "remove": 1, "drain_timeout_s": 5.0}],
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    start_ray(cfg.cluster)
    seen: dict[str, dict[str, torch.Tensor]] = {}

    class Observed(Controller):
        """Reads both sides' weights right after the schedule's change at step 1 (nothing is in flight then)."""

        def _apply_elastic(self, version: int) -> None:
            super()._apply_elastic(version)
            if version == 1:
                (added,) = self.elastic_events[-1]["added"]
                seen["added"] = ray.get(workers.rollout[added].engine_weights.remote())
                seen["trainer"] = ray.get(workers.trainer.gathered_weights.remote())

    try:
        workers = Workers(cfg, str(nano_policy_dir))
        summary = Observed(cfg, run_dir, workers).run()
    finally:
        stop_ray()  # reaps the cluster's processes: left to exit alone, they held up the next module's start by ~15 s
    start = load_policy(nano_policy_dir)[0].state_dict()
    assert seen["added"].keys() == seen["trainer"].keys()
    assert all(torch.equal(seen["added"][n], seen["trainer"][n]) for n in seen["trainer"])
    assert not all(torch.equal(start[n], seen["trainer"][n]) for n in seen["trainer"])  # step 1 changed them
    assert [e["step"] for e in summary["elastic"]] == [1, 2]
    assert summary["elastic"][0]["added"] == ["rollout-1"]
    assert [r["name"] for r in summary["elastic"][1]["removed"]] == ["rollout-1"]  # newest first
    assert summary["steps"] == 3
    assert summary["groups_trained"] == 3 * cfg.train.groups_per_step  # none lost, none trained twice
    assert summary["routing"]["replica_turns"].get("rollout-1", 0) > 0
    assert summary["routing"]["removed_replicas"] == ["rollout-1"]
