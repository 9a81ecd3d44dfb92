"""Weight hand-off to external servers: each new version becomes an HF checkpoint on a shared directory.

A :class:`CheckpointHandOff` actor receives the same published update as a built-in RolloutWorker (full or
delta, through the object store), applies it to its own copy of the weights, and writes them atomically to
``DIR/v{version:08d}`` (temporary name, then rename), so a server never reads a half-written checkpoint. The
servers are then told to load that path (:mod:`rollarc.runtime.openai_replica`). The newest ``KEEP``
checkpoints are kept; older ones are removed once a newer one is complete.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.models.checkpoint import atomic_directory, load_policy
from rollarc.runtime.weight_sync import SyncPayload, engine_weights, receive
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher, WeightReceiver

KEEP = 2  # the version being loaded now and the one before it


def checkpoint_path(directory: str | Path, version: int) -> Path:
    return Path(directory) / f"v{version:08d}"


@ray.remote
class CheckpointHandOff:
    def __init__(self, policy_dir: str, directory: str, sync_cfg: SyncConfig, trainer: Any, version: int):
        torch.set_num_threads(1)
        self.model, self.tokenizer = load_policy(policy_dir)
        self.directory = Path(directory).resolve()
        self.trainer = trainer
        start = WeightPublisher(sync_cfg)
        start.publish(self.model.state_dict(), version=version)
        self.receiver = WeightReceiver(WHOLE, state=dict(start.shard(WHOLE)), version=version)
        self._like = dict(self.model.state_dict())
        self.version = version

    async def initial(self) -> dict[str, Any]:
        """The start weights (exactly the policy directory's, as a built-in replica loads them) at the start version."""
        return await self._write(self.version, 0)

    async def write(self, payload: SyncPayload) -> dict[str, Any]:
        """Apply a published update and write it as the checkpoint of ``payload.version``."""
        (updates,) = await asyncio.gather(*payload.refs)

        async def fetch(have: int | None):
            return await self.trainer.fetch_weights.remote(have)

        report = await receive(self.receiver, updates, fetch)
        self.model.load_state_dict(engine_weights(self.receiver, self._like))
        self.version = report.version
        return await self._write(report.version, report.nbytes)

    async def _write(self, version: int, nbytes: int) -> dict[str, Any]:
        start = time.perf_counter()
        path = checkpoint_path(self.directory, version)
        await asyncio.to_thread(self._save, path)
        return {"path": str(path), "version": version, "write_s": time.perf_counter() - start, "bytes": float(nbytes)}

    def _save(self, path: Path) -> None:
        with atomic_directory(path) as tmp:
            self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
        for old in sorted(self.directory.glob("v" + "[0-9]" * 8))[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)

    def ping(self) -> str:
        return "handoff"
