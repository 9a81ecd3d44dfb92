"""FSDP2 training with two train ranks on a local Ray cluster: it trains, syncs, checkpoints and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from rollarc.models import load_policy
from rollarc.runtime.controller import Controller
from rollarc.runtime.entry import run_training
from rollarc.runtime.ray_cluster import actor_options, start_ray, stop_ray
from rollarc.runtime.resume import record_new_run
from rollarc.runtime.train_group import FSDP_META
from rollarc.runtime.train_worker import TrainWorker
from rollarc.runtime.workers import Workers
from rollarc.train.fsdp import SHARDED_DIR
from tests.integration.test_runtime import config, metrics

pytestmark = pytest.mark.slow

TWO_RANKS = {
    "num_cpus": 2,
    "pools": {"compute": {"count": 3}, "cpu": {"count": 2}},
    "roles": {
        "train": {"pool": "compute", "replicas": 2, "threads": 1},
        "rollout": {"pool": "compute"},
        "env": {"pool": "cpu"},
    },
}


def engine_state(handle) -> dict[str, torch.Tensor]:
    """The weights the rollout engine generates with (read inside the actor)."""
    return ray.get(
        handle.__ray_call__.remote(
            lambda worker: {k: v.detach().clone() for k, v in worker.engine.engine.model.state_dict().items()}
        )
    )


def test_two_ranks_train_sync_checkpoint_and_resume(nano_policy_dir, tmp_path):
    cfg = config(nano_policy_dir, tmp_path, cluster=TWO_RANKS, train={"checkpoint_every": 0})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_new_run(run_dir, cfg)  # config.yaml and its fingerprint, as `rollarc train` writes them
    start_ray(cfg.cluster)
    try:
        workers = Workers(cfg, str(nano_policy_dir))
        controller = Controller(cfg, run_dir, workers)
        try:
            summary = controller.run()
        finally:
            controller.metrics.close()
            controller.timeline.close()
        assert summary["steps"] == 2
        gathered = ray.get(workers.trainer.gathered_weights.remote())
        assert ray.get(workers.trainer.version.remote()) == 2
        rollout = engine_state(workers.rollout["rollout-0"])
        for name, tensor in gathered.items():  # what rank 0 gathered is what the engine runs, bit for bit
            assert torch.equal(rollout[name], tensor), name
        spans = workers.drain_spans() + [
            json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()
        ]
        assert {"train-0", "train-1"} <= {s["worker"] for s in spans if s["kind"] == "train"}
    finally:
        stop_ray()

    initial, _ = load_policy(nano_policy_dir)
    assert not torch.equal(gathered["model.embed_tokens.weight"], initial.state_dict()["model.embed_tokens.weight"])
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] is not None for r in rows)

    checkpoint = run_dir / "checkpoints" / "step_000002"
    assert json.loads((checkpoint / FSDP_META).read_text()) == {"ranks": 2}
    assert (checkpoint / SHARDED_DIR / ".metadata").is_file()
    exported = AutoModelForCausalLM.from_pretrained(checkpoint / "policy").state_dict()
    for name, tensor in gathered.items():
        assert torch.equal(exported[name], tensor), name

    resumed = config(nano_policy_dir, tmp_path, cluster=TWO_RANKS, resume=str(run_dir), train={"steps": 3})
    assert run_training(resumed) == 0
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3]
    final = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000003" / "policy").state_dict()
    assert not torch.equal(final["model.embed_tokens.weight"], exported["model.embed_tokens.weight"])


def test_a_sharded_checkpoint_refuses_the_single_trainer(nano_policy_dir, tmp_path: Path):
    """Resuming FSDP shards with one plain TrainWorker would drop the optimiser state: a clear error instead."""
    checkpoint = tmp_path / "ck"
    (checkpoint / SHARDED_DIR).mkdir(parents=True)
    cfg = config(nano_policy_dir, tmp_path)
    start_ray(cfg.cluster)
    try:
        trainer = TrainWorker.options(**actor_options(cfg.cluster, cfg.cluster.roles.train)).remote(
            str(nano_policy_dir), cfg, 1
        )
        with pytest.raises(ray.exceptions.RayTaskError, match="written by FSDP training"):
            ray.get(trainer.load_checkpoint.remote(str(checkpoint)))
    finally:
        stop_ray()
