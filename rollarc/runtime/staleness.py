"""The staleness bound as explicit bookkeeping: admission control and the freshness test.

Definitions (exact; see docs/async.md):
- A training step that starts from policy version ``u`` produces version ``u + 1``.
- A group's staleness at that step is ``u - min_version``, the oldest version among its tokens.
- With bound ``k``, a group is trained only if its staleness is at most ``k``; otherwise it is dropped
  or restarted, and counted.

Admission: a new group is started only if, landing behind the groups already outstanding, it would
be trained by a step that starts at most ``k`` versions after the version the rollouts now have:

    next_train_version + outstanding // B - published_version <= k

With ``k = 0`` this admits exactly ``B`` groups per published version and none while a step trains
or its weights sync: synchronous on-policy training falls out of the same rule, with no second code
path. In-flight (admitted, unconsumed) groups never exceed ``(k + 1) * B``, so memory stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StalenessLedger:
    groups_per_step: int
    max_staleness: int
    published_version: int = 0
    next_train_version: int = 0
    outstanding: int = 0

    def can_admit(self) -> bool:
        ahead = self.outstanding // self.groups_per_step
        return self.next_train_version + ahead - self.published_version <= self.max_staleness

    def admit(self) -> None:
        self.outstanding += 1

    def discard(self, n: int = 1) -> None:
        """Groups that will never be trained (dropped, failed, cancelled)."""
        if n > self.outstanding:
            raise ValueError(f"discarding {n} groups but only {self.outstanding} are outstanding")
        self.outstanding -= n

    def staleness(self, min_version: int, train_version: int | None = None) -> int:
        version = self.next_train_version if train_version is None else train_version
        return version - min_version

    def is_fresh(self, min_version: int, train_version: int | None = None) -> bool:
        return self.staleness(min_version, train_version) <= self.max_staleness

    def consume(self, n: int) -> int:
        """Hand ``n`` groups to a training step; returns the version that step starts from."""
        if n > self.outstanding:
            raise ValueError(f"consuming {n} groups but only {self.outstanding} are outstanding")
        self.outstanding -= n
        version = self.next_train_version
        self.next_train_version += 1
        return version

    def publish(self, version: int) -> None:
        if version < self.published_version:
            raise ValueError(f"published version went back from {self.published_version} to {version}")
        self.published_version = version

    @property
    def max_in_flight(self) -> int:
        return (self.max_staleness + 1) * self.groups_per_step
