"""TrainWorker: the policy (and its optional frozen reference) on the compute pool, as a Ray actor.

With ``model.lora`` the policy is wrapped with peft adapters (``rollarc.train.lora``): it publishes only the
adapter, and a checkpoint holds the base unchanged in ``policy/`` (a copy of the directory the run started
from) and the adapter in PEFT's format in ``adapter/``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.agent.trajectory import Trajectory
from rollarc.config import Config
from rollarc.models.checkpoint import REFERENCE_FILE, load_policy, load_state_file, save_state_file
from rollarc.models.checkpoint_write import checkpoint_directory
from rollarc.report.metrics import process_rss_mb
from rollarc.runtime.weight_sync import ShardPayload, SyncPayload
from rollarc.sync.shard import ShardSpec
from rollarc.sync.site import fp32_nbytes, site_layouts
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher, updates_nbytes
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.trainer_options import trainer_options


@ray.remote
class TrainWorker:
    def __init__(self, policy_dir: str, cfg: Config, threads: int):
        torch.set_num_threads(threads)
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.policy_dir = policy_dir
        self.model, self.tokenizer = load_policy(policy_dir)
        self.lora = cfg.model.lora
        if self.lora is not None:
            from rollarc.train.lora import apply_lora  # deferred: peft is needed only with model.lora

            self.model = apply_lora(self.model, self.lora, cfg.seed)  # type: ignore[assignment]  # a PeftModel wraps it
        self.trainer = PolicyTrainer(
            self.model,
            cfg.algo,
            cfg.train.lr,
            **trainer_options(cfg, self.tokenizer.pad_token_id),
            adapter=self.lora is not None,
        )
        self._spans: list[dict[str, Any]] = []
        self.publisher = WeightPublisher(cfg.sync)
        self.publisher.publish(self.trainer.named_weights(), version=self.trainer.version)

    def train_step(self, groups: list[list[Trajectory]], step: int) -> dict[str, Any]:
        t0 = time.time()
        stats = self.trainer.train_step(groups)
        stats["rss_mb"] = process_rss_mb()
        self._spans.append(
            {
                "worker": "train-0",
                "role": "train",
                "kind": "train",
                "t0": t0,
                "t1": time.time(),
                "step": step,
                "tokens": stats["tokens"],
            }
        )
        return stats

    def publish(self) -> SyncPayload:
        """Publish the version just trained (full or delta) and put the update into the object store once."""
        t0 = time.time()
        self.publisher.publish(self.trainer.named_weights(), version=self.trainer.version)
        payload = latest_payload(self.publisher, self.trainer.version, self.cfg.sync.method)
        self._spans.append(sync_span(t0, self.trainer.version))
        return payload

    def fetch_weights(self, have: int | None, layout: ShardSpec = WHOLE) -> tuple[VersionedUpdate, ...]:
        """Catch-up for a receiver of ``layout`` at version ``have``: a delta chain or a full copy, by bytes."""
        return self.publisher.fetch(layout, have)

    def register_site(self, world: int) -> dict[str, Any]:
        """Encode each update in ``world`` shards for the borrowed site too, from the next version on."""
        return register_site(self.publisher, world)

    def version(self) -> int:
        return self.trainer.version

    def gathered_weights(self) -> dict[str, torch.Tensor]:
        """The current weights on the CPU (the FSDP group's method of the same name gathers its shards).

        With LoRA, the effective weights: the base with the adapters merged by peft (what replicas must run).
        """
        if self.lora is not None:
            from rollarc.train.lora import merged_weights  # deferred: peft, needed only with model.lora

            return merged_weights(self.model)  # type: ignore[arg-type]  # a peft.PeftModel
        return self.trainer.named_weights()

    def save_checkpoint(self, path: str, controller_state: dict[str, Any]) -> str:
        """Policy (HF format), optimiser state and controller state, written atomically as one directory (with
        its manifest; a full disk raises DiskFull)."""
        with checkpoint_directory(path) as tmp:
            if self.lora is not None:
                from rollarc.train.lora import ADAPTER_DIR, save_adapter  # deferred: peft, only with model.lora

                shutil.copytree(self.policy_dir, tmp / "policy")  # the frozen base, byte for byte
                save_adapter(self.model, tmp / ADAPTER_DIR)  # type: ignore[arg-type]  # a peft.PeftModel
            else:
                self.model.save_pretrained(tmp / "policy", safe_serialization=True)
                self.tokenizer.save_pretrained(tmp / "policy")
            save_state_file(self.trainer.optimizer_state(), tmp / "trainer_state.pt")
            self.trainer.save_reference(tmp / REFERENCE_FILE)
            (tmp / "state.json").write_text(json.dumps(controller_state, indent=1))
        return path

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        path_ = Path(path)
        if (path_ / "sharded").is_dir():
            raise ValueError(
                f"{path} was written by FSDP training (it holds sharded/); resume it with "
                "cluster.roles.train.replicas > 1 or train.fsdp.on_one_replica: true"
            )
        if self.lora is not None:
            from rollarc.train.lora import ADAPTER_DIR, load_adapter  # deferred: peft, only with model.lora

            load_adapter(self.model, path_ / ADAPTER_DIR)  # type: ignore[arg-type]  # a peft.PeftModel
        else:
            model, _ = load_policy(path_ / "policy")
            self.model.load_state_dict(model.state_dict())
        self.trainer.load_optimizer_state(load_state_file(path_ / "trainer_state.pt"))
        self.trainer.load_reference(path_ / REFERENCE_FILE)
        layouts = self.publisher.layouts  # the borrowed site's, if registered: still encoded after the load
        self.publisher = WeightPublisher(self.cfg.sync)
        self.publisher.publish(self.trainer.named_weights(), version=self.trainer.version)
        for layout in layouts:
            self.publisher.register(layout)
        return json.loads((path_ / "state.json").read_text())

    def drain_spans(self) -> list[dict[str, Any]]:
        spans, self._spans = self._spans, []
        return spans


def latest_payload(publisher: WeightPublisher, version: int, method: str) -> SyncPayload:
    """The update just published (full or delta), put into the object store once for every receiver; and, with
    a borrowed site registered (``register_site``), one object per shard layout, each sent to one member."""
    updates = publisher.latest(WHOLE)
    shards = {}
    for layout in publisher.layouts:
        if layout != WHOLE:
            shard = publisher.latest(layout)
            shards[layout] = ShardPayload(version, layout, [ray.put(shard)], updates_nbytes(shard))
    return SyncPayload(
        version=version,
        method=method,
        refs=[ray.put(updates)],
        nbytes=updates_nbytes(updates),
        model_bytes=sum(u.model_bytes for u in updates),
        shards=shards,
    )


def register_site(publisher: WeightPublisher, world: int) -> dict[str, Any]:
    """Register the ``world`` shard layouts of a borrowed site (``rollarc.sync.site``) with ``publisher``.

    Returns the layouts (rank order) and ``full_copy_bytes``, one fp32 copy of the weights: what a plain
    copy into the site would cost, the yardstick of its measured bytes.
    """
    state = publisher.shard(WHOLE)
    layouts = site_layouts({name: tuple(t.shape) for name, t in state.items()}, world)
    for layout in layouts:
        publisher.register(layout)
    return {"layouts": layouts, "full_copy_bytes": fp32_nbytes(state)}


def sync_span(t0: float, version: int) -> dict[str, Any]:
    """The trainer's timeline span of publishing ``version``."""
    return {"worker": "train-0", "role": "train", "kind": "sync", "t0": t0, "t1": time.time(), "version": version}
