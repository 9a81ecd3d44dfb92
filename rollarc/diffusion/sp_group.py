"""An elastic sequence-parallel group of DiT members, each a Ray actor on its own node or device.

Each member is an :class:`~rollarc.diffusion.sp_member.SPMember` actor holding the DiT in memory, placed by
``place`` (on a node of its own in the benchmark and the tests; by default on the caller's node), computing on
``device`` (a ``model.device`` name) and reserving ``member_gpus`` GPUs. The driver forms one
``torch.distributed`` group across the actors (gloo, or NCCL when each member has a GPU of its own:
:func:`~rollarc.diffusion.t2i_device.sp_transport`; a fresh TCPStore rendezvous on rank 0's node
per generation) of the largest SP degree the live members allow
(:func:`~rollarc.diffusion.ulysses.largest_degree`); members beyond it wait as spares.

- **Loss** (a member's node is removed or drained away, or its actor dies): the member is gone from the
  group; the survivors destroy the old group and form a new one. Their weights never leave memory, so
  nothing is read from disk (each member counts its disk loads: :meth:`ElasticSPGroup.disk_loads`).
- **Join**: a new actor builds the DiT *architecture* from its config (no weights) and receives every
  tensor by broadcast from rank 0 of the new group, a peer's memory, not the checkpoint.
- **Warm restart** (the baseline of ``rollarc bench spot``'s ``recovery_speedup``,
  :meth:`ElasticSPGroup.warm_restart`): what a non-elastic job whose processes are already up pays after a
  loss. The same surviving actors (processes started, torch and diffusers imported) drop the group, read the
  weights from the checkpoint on disk, and form a new group of the same degree as the elastic regroup;
  both are timed to the first forward pass of the new group.
- **Cold restart** (:meth:`ElasticSPGroup.cold_restart`): every member a new actor (a new process that
  imports the libraries) that loads the weights from disk and forms a new group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from diffusers import PixArtTransformer2DModel
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rollarc.config.cluster import CallDeadlines
from rollarc.diffusion.model import TRANSFORMER_DIR
from rollarc.diffusion.sp_member import SPMember
from rollarc.diffusion.ulysses import largest_degree
from rollarc.rayproc.deadline import Deadlines

GROUP_TIMEOUT_S = 60.0  # a collective or the rendezvous with a silent peer fails after this (gloo)
Placement = Callable[[int], dict[str, Any]]  # the n-th member ever started -> its Ray actor options


@dataclass(eq=False)
class Member:
    """A member actor and ``n``: it was the ``n``-th member the group started (what ``place`` placed)."""

    n: int
    actor: Any


class GroupBroken(RuntimeError):
    """A member was lost while the group was in use; ``form()`` regroups the survivors."""


def on_this_node() -> Placement:
    """Every member on the caller's node (hard affinity), standing for that node's devices."""
    node = ray.get_runtime_context().get_node_id()
    return lambda _n: {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


def on_nodes(resources: list[str]) -> Placement:
    """The ``n``-th member on the node that carries ``resources[n]`` (the list may grow as members join)."""
    return lambda n: {"resources": {resources[n]: 1}}


def on_named_nodes(prefix: str) -> Placement:
    """The ``n``-th member on the node that carries the resource ``prefix`` + n: what a spot fleet adds for each
    member it starts (a replacement member's node too), so that a member is lost with its own node."""
    return lambda n: {"resources": {f"{prefix}{n}": 1}}


class ElasticSPGroup:
    """The driver side: members, the current group, forward, loss, join, and the restart baselines."""

    def __init__(
        self,
        members: int,
        policy_dir: str | Path,
        threads: int = 1,
        place: Placement | None = None,
        deadlines: Deadlines | None = None,
        device: str = "cpu",
        member_gpus: float = 0.0,
    ):
        self.policy_dir, self.threads = Path(policy_dir), threads
        self.device, self.member_gpus = device, member_gpus
        self.deadlines = deadlines or Deadlines.of(CallDeadlines())
        self.place = place or on_this_node()
        self.config = dict(PixArtTransformer2DModel.load_config(self.policy_dir / TRANSFORMER_DIR))
        cfg = self.config
        self.heads = int(cfg["num_attention_heads"])
        self.tokens = (int(cfg["sample_size"]) // int(cfg["patch_size"])) ** 2
        self.started = 0  # members ever started (the next one's index for ``place``)
        self.members: list[Member] = []
        self.group: list[Member] = []
        self.generation = 0
        self._start(members, "load", str(self.policy_dir))

    def _start(self, count: int, how: str, arg: Any) -> list[Member]:
        """``count`` new member actors, each ``load``-ing from disk or ``build``-ing the architecture."""
        new = []
        for _ in range(count):
            options = {"num_cpus": 0, **self.place(self.started)}
            if self.member_gpus:
                options["num_gpus"] = self.member_gpus
            actor = SPMember.options(**options).remote(  # type: ignore[attr-defined]
                self.threads, GROUP_TIMEOUT_S, self.device, self.member_gpus
            )
            new.append(Member(self.started, actor))
            self.started += 1
        self._each("start", [getattr(m.actor, how).remote(arg) for m in new], f"{how} (a new member)")
        self.members += new
        return new

    def _each(self, kind: Any, refs: list[Any], method: str) -> list[Any]:
        return list(self.deadlines.get(kind, refs, "an SP member", method)) if refs else []

    @property
    def degree(self) -> int:
        return len(self.group)

    def alive(self) -> list[Member]:
        """The members whose actors still answer (a member whose node went raises at once)."""
        refs = [m.actor.loads.remote() for m in self.members]
        live = []
        for m, ref in zip(self.members, refs, strict=True):
            try:
                ray.get(ref, timeout=self.deadlines.call_s)
            except (RayActorError, GetTimeoutError):  # dead, or hung: either way not a member any more
                ray.kill(m.actor, no_restart=True)
                continue
            live.append(m)
        return live

    def wait_for_loss(self, members: int, timeout_s: float) -> float:
        """Poll until no more than ``members`` are alive (Ray has seen a node go), dropping the lost ones;
        returns the seconds."""
        t0 = time.perf_counter()
        while len(live := self.alive()) > members:
            if time.perf_counter() - t0 > timeout_s:
                raise TimeoutError(f"no SP member was seen lost within {timeout_s:g} s")
            time.sleep(0.05)
        self.members = live
        return time.perf_counter() - t0

    def form(self, degree: int | None = None, weights_from_peer: bool = False) -> int:
        """A new group of ``degree`` (default: the largest the live members allow); returns the degree."""
        self.members = self.alive()
        if not self.members:
            raise GroupBroken("every SP member is gone")
        most = largest_degree(len(self.members), self.heads, self.tokens)
        degree = most if degree is None else degree
        if not 1 <= degree <= len(self.members) or self.heads % degree or self.tokens % degree:
            raise ValueError(f"SP degree {degree} is not possible with {len(self.members)} members")
        self.generation += 1
        group, spares = self.members[:degree], self.members[degree:]
        host, port = self.deadlines.get("call", group[0].actor.open_store.remote(), "an SP member", "open_store")
        src = 0 if weights_from_peer else None
        refs = [m.actor.join_group.remote(host, port, rank, degree, src) for rank, m in enumerate(group)]
        self._each("train", refs + [m.actor.leave.remote() for m in spares], "join_group")
        self.group = group
        return degree

    def forward(self, x: torch.Tensor, t: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The velocity by the current group, on the CPU; raises GroupBroken if a member is lost on the way."""
        if not self.group:
            raise GroupBroken("no SP group is formed")
        args = [ray.put(a.cpu()) for a in (x, t, hidden, mask)]  # members may sit on other devices
        refs = [m.actor.forward.remote(*args) for m in self.group]
        outs: list[Any] = []
        broken: str | None = None
        for ref in refs:  # every reply, so that no member is left mid-call when the group is formed again
            try:
                status, value = self.deadlines.get("train", ref, "an SP member", "forward")
            except RayActorError as err:
                broken = f"an SP member is gone ({type(err).__name__})"
                continue
            if status == "lost":
                broken = f"an SP collective failed: {value}"
            outs.append(value)
        if broken is not None:
            self.group = []
            raise GroupBroken(broken)
        out: torch.Tensor = outs[0]
        return out

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Every member (spares too, since any may become rank 0 of a later group) takes ``state``."""
        ref = ray.put({k: v.cpu() for k, v in state.items()})
        self._each("train", [m.actor.set_weights.remote(ref) for m in self.members], "set_weights")

    def drop(self, member: Member) -> None:
        """``member`` leaves (its actor is killed, no goodbye); the group must be formed again."""
        ray.kill(member.actor, no_restart=True)
        self.members.remove(member)
        self.group = []

    def shrink(self, n: int | None = None) -> int:
        """The member started ``n``-th (default: the current group's last) gives its device back (a preemption
        notice); the survivors regroup at the largest degree they allow, keeping their weights. Returns the new
        degree. A member already gone (its node went before the notice was obeyed) leaves nothing to drop."""
        victims = [m for m in self.members if m.n == n] if n is not None else (self.group or self.members)[-1:]
        if victims:
            if len(self.members) < 2:
                raise ValueError("an SP group of one member cannot give a member back")
            self.drop(victims[0])
        return self.form()

    def grow(self) -> int:
        """A member joins with the architecture only and gets the weights from rank 0; returns the new degree."""
        self.join(1)
        return self.form(weights_from_peer=True)

    def join(self, count: int = 1) -> None:
        """New members with the architecture only; the next ``form(weights_from_peer=True)`` fills them (rank 0,
        the weights' source, stays a member that holds them: joiners go last)."""
        self.members = self.alive()
        self._start(count, "build", self.config)

    def digests(self) -> list[str]:
        """Each member's weight digest (equal strings: bitwise-equal weights)."""
        return [str(d) for d in self._each("call", [m.actor.digest.remote() for m in self.members], "digest")]

    def disk_loads(self) -> int:
        """Checkpoint reads by the members alive now, since each started."""
        return sum(int(n) for n in self._each("call", [m.actor.loads.remote() for m in self.members], "loads"))

    def node_ids(self) -> list[str]:
        return [str(n) for n in self._each("call", [m.actor.node_id.remote() for m in self.members], "node_id")]

    def warm_restart(self) -> int:
        """The warm-restart baseline: the live members reload the weights from disk and form a group of the
        same degree an elastic regroup would (see the module's docstring)."""
        self.members = self.alive()
        self._each("train", [m.actor.load.remote(str(self.policy_dir)) for m in self.members], "load")
        return self.form()

    def cold_restart(self, degree: int) -> int:
        """The cold baseline: every member replaced by a new actor that loads the weights from disk."""
        self.close()
        self._start(degree, "load", str(self.policy_dir))
        return self.form(degree)

    def close(self) -> None:
        refs = [m.actor.exit.remote() for m in self.members]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self.deadlines.call_s)
        for m in self.members:
            ray.kill(m.actor, no_restart=True)
        self.members, self.group = [], []
