"""A policy whose DiT forwards run through an elastic Ulysses SP group: what the sampler and explorers use
when ``cluster.sp_degree > 1``.

Sampling code (``sample_sde``, ``sample_ode``, the resumable ``start``/``advance``) only calls
``encode``, ``velocity`` and ``image_size``, so an :class:`SPPolicy` drops in where a
:class:`~rollarc.diffusion.model.T2IPolicy` goes: the prompt encoder runs in the caller's process (it is
cheap and its output is replicated to every rank anyway), and each velocity is one
:meth:`~rollarc.diffusion.sp_group.ElasticSPGroup.forward` of the group's members, each on its shard of
the image tokens. The caller keeps its own copy of the weights too, so a new version is loaded in both
(:meth:`set_weights`), and the group can shrink on a preemption notice and grow back when a device joins
without anyone reading the weights from disk.

Only sampling uses SP: Flow-GRPO's backward runs in the trainer on the full sequence (docs/spot.md says
why).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from rollarc.diffusion.model import T2IPolicy
from rollarc.diffusion.sp_group import ElasticSPGroup, GroupBroken, Placement


class SPPolicy(T2IPolicy):
    """``policy``'s encoder in this process; its DiT velocity through an SP group of ``degree`` members (Ray
    actors placed by ``place``, by default on this actor's node, standing for its devices: each computes on
    ``device``, a ``model.device`` name, and reserves ``member_gpus``)."""

    def __init__(
        self,
        policy: T2IPolicy,
        policy_dir: str | Path,
        degree: int,
        threads: int,
        device: str = "cpu",
        member_gpus: float = 0.0,
        place: Placement | None = None,
    ):
        super().__init__(policy.transformer, policy.encoder)
        t0 = time.perf_counter()
        self.group = ElasticSPGroup(degree, policy_dir, threads, place=place, device=device, member_gpus=member_gpus)
        self.regroups = 0
        self.joins = 0
        self.regroup_s: list[float] = []
        if self.group.form() != degree:
            self.group.close()
            raise ValueError(f"SP degree {degree} does not divide the DiT's heads and tokens")
        # what a cold restart costs on this machine, measured where it happens: new member actors that
        # load the weights from disk and form a group (the baseline a regroup is compared with in training)
        self.cold_start_s = time.perf_counter() - t0

    @property
    def degree(self) -> int:
        return self.group.degree

    def velocity(self, x: torch.Tensor, t: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        hidden, mask = context
        try:
            return self.group.forward(x, t, hidden, mask).to(x.device)
        except GroupBroken:  # a member died without a notice: the survivors regroup, the step runs again
            self._regroup(self.group.form)
            return self.group.forward(x, t, hidden, mask).to(x.device)

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """A new DiT version, in this process and in every member."""
        self.transformer.load_state_dict(state)
        self.group.set_weights(state)

    def shrink(self, member: int | None = None) -> float:
        """The member started ``member``-th (None: the group's last) leaves (its device or node is being reclaimed);
        the survivors regroup. Returns the seconds."""
        return self._regroup(lambda: self.group.shrink(member))

    def _regroup(self, how: Any) -> float:
        t0 = time.perf_counter()
        how()
        seconds = time.perf_counter() - t0
        self.regroups += 1
        self.regroup_s.append(seconds)
        return seconds

    def grow(self) -> float:
        """A replacement member joins with weights from a peer. Returns the seconds."""
        t0 = time.perf_counter()
        self.group.grow()
        self.joins += 1
        return time.perf_counter() - t0

    def counters(self) -> dict[str, Any]:
        return {"sp_degree": self.degree, "sp_regroups": self.regroups, "sp_joins": self.joins}

    def close(self) -> None:
        self.group.close()
