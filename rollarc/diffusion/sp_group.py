"""An elastic sequence-parallel group of DiT processes: regroup after a loss, weights from a peer for a joiner.

Each member is a process holding the DiT in memory. The driver forms a ``torch.distributed`` group
(gloo on the CPU; a fresh rendezvous per generation) of the largest SP degree the live members allow
(:func:`~rollarc.diffusion.ulysses.largest_degree`); members beyond it wait as spares.

- **Loss** (a member process dies, with or without notice): the survivors drop the old group and form
  a new one. Their weights never leave memory, so nothing is read from disk.
- **Join**: a new process builds the DiT *architecture* from its config (no weights) and receives every
  tensor by broadcast from rank 0 of the new group, a peer's memory, not the checkpoint.
- **Cold restart** (the baseline a non-elastic job pays): every member is a new process that imports
  torch and diffusers, loads the weights from disk and forms a new group.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from diffusers import PixArtTransformer2DModel

from rollarc.diffusion.model import TRANSFORMER_DIR
from rollarc.diffusion.ulysses import largest_degree, sp_forward, use_ulysses

GROUP_TIMEOUT = timedelta(seconds=60)


def _member(conn: Connection, threads: int) -> None:
    """A member's command loop (runs in its own process)."""
    torch.set_num_threads(threads)
    transformer: Any = None
    rank = size = 0
    while True:
        try:
            cmd, *args = conn.recv()
        except EOFError:  # the driver's process is gone (e.g. its Ray node was removed): nothing left to serve
            return
        if cmd == "load":  # cold: weights from disk
            transformer = PixArtTransformer2DModel.from_pretrained(
                Path(args[0]) / TRANSFORMER_DIR, low_cpu_mem_usage=False
            ).eval()
            conn.send(("ok", None))
        elif cmd == "build":  # joiner: the architecture only; weights come from a peer
            transformer = PixArtTransformer2DModel.from_config(args[0]).eval()
            conn.send(("ok", None))
        elif cmd == "group":
            store_path, rank, size, weights_from = args
            if dist.is_initialized():
                dist.destroy_process_group()
            store = dist.FileStore(store_path, size)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=GROUP_TIMEOUT)
            if weights_from is not None:
                for tensor in transformer.state_dict().values():
                    dist.broadcast(tensor, src=weights_from)
            use_ulysses(transformer, size, None)
            conn.send(("ok", None))
        elif cmd == "leave":
            if dist.is_initialized():
                dist.destroy_process_group()
            conn.send(("ok", None))
        elif cmd == "forward":
            x, t, hidden, mask = args
            try:
                out = sp_forward(transformer, x, t, hidden, mask, rank, size, None)
            except RuntimeError as err:  # a peer died mid-collective (gloo: connection closed, or the timeout)
                conn.send(("lost", str(err).splitlines()[0]))
                continue
            conn.send(("ok", out if rank == 0 else None))
        elif cmd == "weights":  # a new weight version, in place (the architecture is unchanged)
            transformer.load_state_dict(args[0])
            conn.send(("ok", None))
        elif cmd == "checksum":
            conn.send(("ok", float(sum(v.double().sum() for v in transformer.state_dict().values()))))
        elif cmd == "exit":
            if dist.is_initialized():
                dist.destroy_process_group()
            conn.send(("ok", None))
            return


class GroupBroken(RuntimeError):
    """A member was lost while the group was in use; ``form()`` regroups the survivors."""


class _Member:
    def __init__(self, ctx: Any, threads: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_member, args=(child, threads), daemon=True)
        self.process.start()

    def send(self, *cmd: Any) -> None:
        self.conn.send(cmd)

    def reply(self) -> Any:
        try:
            status, value = self.conn.recv()
        except EOFError:  # the member process itself is gone
            raise GroupBroken("an SP member's process ended") from None
        if status == "lost":
            raise GroupBroken(f"an SP collective failed: {value}")
        return value


class ElasticSPGroup:
    """The driver side: members, the current group, forward, loss, join, and the cold-restart baseline."""

    def __init__(self, members: int, policy_dir: str | Path, workdir: str | Path, threads: int = 1):
        self.ctx = mp.get_context("spawn")
        self.policy_dir, self.workdir, self.threads = Path(policy_dir), Path(workdir), threads
        self.config = dict(PixArtTransformer2DModel.load_config(self.policy_dir / TRANSFORMER_DIR))
        cfg = self.config
        self.heads = int(cfg["num_attention_heads"])
        self.tokens = (int(cfg["sample_size"]) // int(cfg["patch_size"])) ** 2
        self.members: list[_Member] = []
        self.group: list[_Member] = []
        self.generation = 0
        self._spawn(members, ("load", str(self.policy_dir)))

    def _spawn(self, count: int, first: tuple[Any, ...]) -> list[_Member]:
        new = [_Member(self.ctx, self.threads) for _ in range(count)]
        for m in new:
            m.send(*first)
        for m in new:
            m.reply()
        self.members += new
        return new

    @property
    def degree(self) -> int:
        return len(self.group)

    def form(self, degree: int | None = None, weights_from_peer: bool = False) -> int:
        """A new group of ``degree`` (default: the largest the live members allow); returns the degree."""
        self.members = [m for m in self.members if m.process.is_alive()]
        most = largest_degree(len(self.members), self.heads, self.tokens)
        degree = most if degree is None else degree
        if not 1 <= degree <= len(self.members) or self.heads % degree or self.tokens % degree:
            raise ValueError(f"SP degree {degree} is not possible with {len(self.members)} members")
        self.generation += 1
        store = self.workdir / f"sp-store-{self.generation}"
        group, spares = self.members[:degree], self.members[degree:]
        for rank, m in enumerate(group):
            m.send("group", str(store), rank, degree, 0 if weights_from_peer else None)
        for m in spares:
            m.send("leave")
        for m in group + spares:
            m.reply()
        self.group = group
        return degree

    def forward(self, x: torch.Tensor, t: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The velocity by the current group; raises GroupBroken if a member is lost on the way."""
        for m in self.group:
            m.send("forward", x, t, hidden, mask)
        outs: list[Any] = []
        broken: GroupBroken | None = None
        for m in self.group:  # collect every reply, so no stale one is left in a pipe
            try:
                outs.append(m.reply())
            except GroupBroken as err:
                broken = err
        if broken is not None:
            self.group = []
            raise broken
        out: torch.Tensor = outs[0]
        return out

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Every member (spares too, since any may become rank 0 of a later group) takes ``state``."""
        for m in self.members:
            m.send("weights", state)
        for m in self.members:
            m.reply()

    def shrink(self) -> int:
        """One member of the current group gives its device back (a preemption notice); the survivors regroup
        at the largest degree they allow, keeping their weights. Returns the new degree."""
        if len(self.members) < 2:
            raise ValueError("an SP group of one member cannot give a member back")
        victim = (self.group or self.members)[-1]
        victim.process.kill()
        victim.process.join()
        self.members.remove(victim)
        self.group = []
        return self.form()

    def grow(self) -> int:
        """A member joins with the architecture only and gets the weights from rank 0; returns the new degree."""
        self.join(1)
        return self.form(weights_from_peer=True)

    def checksums(self) -> list[float]:
        for m in self.members:
            m.send("checksum")
        return [float(m.reply()) for m in self.members]

    def lose(self, index: int) -> None:
        """Member ``index`` of the current group vanishes (its process is killed, no goodbye)."""
        victim = self.group[index]
        victim.process.kill()
        victim.process.join()
        self.members.remove(victim)
        self.group = []

    def join(self, count: int = 1) -> None:
        """New members with the architecture only; the next ``form(weights_from_peer=True)`` fills them."""
        new = [_Member(self.ctx, self.threads) for _ in range(count)]
        for m in new:
            m.send("build", self.config)
        for m in new:
            m.reply()
        self.members = [m for m in self.members if m.process.is_alive()] + new
        # rank 0 (the weights' source) must be a member that already holds them
        self.members = [m for m in self.members if m not in new] + new

    def cold_restart(self, degree: int) -> None:
        """The baseline: every member replaced by a new process that loads the weights from disk."""
        self.close()
        self._spawn(degree, ("load", str(self.policy_dir)))
        self.form(degree)

    def close(self) -> None:
        for m in self.members:
            if m.process.is_alive():
                m.send("exit")
        for m in self.members:
            if m.process.is_alive():
                m.reply()
                m.process.join(timeout=30)
        self.members, self.group = [], []


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start
