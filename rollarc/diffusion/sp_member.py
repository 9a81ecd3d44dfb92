"""One member of an elastic SP group: a Ray actor holding the DiT, one rank of a process group across actors.

A member lives on its own node (or device) and its weights never leave its memory across regroups. The
group's rendezvous is a ``torch.distributed.TCPStore`` that rank 0 opens on its own node at a port the OS
picks (:meth:`SPMember.open_store`), fresh for each generation of the group, so a member of an older
generation can never join a newer one. Every wait (store, collectives) is bounded by the group's timeout.

The DiT sits on the member's ``model.device`` (resolved here: Ray shows the actor only the GPUs it reserved);
tensors arrive and leave on the CPU. The backend is :func:`~rollarc.diffusion.t2i_device.sp_transport`'s.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist
from diffusers import PixArtTransformer2DModel

from rollarc.diffusion.model import TRANSFORMER_DIR
from rollarc.diffusion.t2i_device import sp_transport
from rollarc.diffusion.ulysses import sp_forward, use_ulysses
from rollarc.models.device import resolve_device


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name and bytes, in key order: equal digests mean bitwise-equal weights."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


@ray.remote(max_restarts=0)
class SPMember:
    """A DiT and its rank in the current group; ``disk_loads`` counts every read of the checkpoint."""

    def __init__(self, threads: int, timeout_s: float, device: str = "cpu", gpus: float = 0.0):
        torch.set_num_threads(threads)
        self.timeout = timedelta(seconds=timeout_s)
        self.device = resolve_device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL binds this rank to its device
        self.transport = sp_transport(self.device.type, gpus)
        self.transformer: Any = None
        self.store: Any = None
        self.rank = self.size = 0
        self.disk_loads = 0

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def load(self, policy_dir: str) -> None:
        """The weights from the checkpoint on disk (a cold start, or a warm restart's reload)."""
        self._leave()
        self.transformer = (
            PixArtTransformer2DModel.from_pretrained(Path(policy_dir) / TRANSFORMER_DIR, low_cpu_mem_usage=False)
            .to(self.device)
            .eval()
        )
        self.disk_loads += 1

    def build(self, config: dict[str, Any]) -> None:
        """A joiner: the architecture only; the weights come from a peer when the group forms."""
        self.transformer = PixArtTransformer2DModel.from_config(config).to(self.device).eval()

    def open_store(self) -> tuple[str, int]:
        """As the next group's rank 0: drop the old group, open a fresh store; its address for the others."""
        self._leave()
        host = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=self.timeout)
        return host, int(self.store.port)

    def join_group(self, host: str, port: int, rank: int, size: int, weights_from: int | None) -> None:
        """Rank ``rank`` of a new group of ``size`` (rank 0 has called ``open_store``); with ``weights_from``
        every tensor is broadcast from that rank (a joiner's weights, from a peer's memory)."""
        if rank != 0:
            self._leave()
            self.store = dist.TCPStore(host, port, is_master=False, timeout=self.timeout)
        backend = self.transport.backend
        dist.init_process_group(backend, store=self.store, rank=rank, world_size=size, timeout=self.timeout)
        self.rank, self.size = rank, size
        if weights_from is not None:  # gloo broadcasts CUDA tensors too
            for tensor in self.transformer.state_dict().values():
                dist.broadcast(tensor, src=weights_from)
        use_ulysses(self.transformer, size, None, self.transport.staged)

    def leave(self) -> None:
        """A spare: out of any group (its weights stay)."""
        self._leave()

    def _leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self.store = None

    def forward(self, x: torch.Tensor, t: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor) -> Any:
        """``("ok", velocity)`` on rank 0 (``None`` elsewhere), or ``("lost", why)`` if a peer died mid-collective."""
        x, t, hidden, mask = (a.to(self.device) for a in (x, t, hidden, mask))
        try:
            out = sp_forward(self.transformer, x, t, hidden, mask, self.rank, self.size, None, self.transport.staged)
        except RuntimeError as err:  # gloo or NCCL: a peer's connection closed, or the group's timeout
            return "lost", str(err).splitlines()[0]
        return "ok", out.cpu() if self.rank == 0 else None

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """A new weight version, in place (the architecture is unchanged)."""
        self.transformer.load_state_dict(state)

    def digest(self) -> str:
        return state_digest(self.transformer.state_dict())

    def loads(self) -> int:
        return self.disk_loads

    def exit(self) -> None:
        self._leave()
