"""The buffer of finished groups, and how a training batch is taken from it under the staleness bound.

A batch is ``B`` groups whose staleness at the step that will train them is at most ``k``. Groups
that are too stale are never trained: they are handed back to the caller to drop or restart (and
count). Among fresh groups, the oldest (smallest ``min_version``) go first, so a slow group is not
overtaken until it turns stale. Groups are never split: a group is trained whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class FinishedGroup(Protocol):
    @property
    def min_version(self) -> int: ...

    @property
    def order(self) -> int: ...


G = TypeVar("G", bound=FinishedGroup)


@dataclass
class BatchDecision(Generic[G]):
    batch: list[G]
    stale: list[G]


class GroupBuffer(Generic[G]):
    def __init__(self, groups_per_step: int, max_staleness: int):
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.ready: list[G] = []

    def add(self, group: G) -> None:
        self.ready.append(group)

    def __len__(self) -> int:
        return len(self.ready)

    def take(self, train_version: int) -> BatchDecision[G]:
        """Remove stale groups (returned in ``stale``), then a batch of B fresh ones if there are enough."""
        fresh = [g for g in self.ready if train_version - g.min_version <= self.max_staleness]
        stale = [g for g in self.ready if train_version - g.min_version > self.max_staleness]
        if len(fresh) < self.groups_per_step:
            self.ready = fresh
            return BatchDecision(batch=[], stale=stale)
        fresh.sort(key=lambda g: (g.min_version, g.order))
        batch, self.ready = fresh[: self.groups_per_step], fresh[self.groups_per_step :]
        return BatchDecision(batch=batch, stale=stale)
