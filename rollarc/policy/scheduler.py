"""Admission, finished groups and training batches as one state machine with an explicit event API.

Events in (the driver reports them, whatever runs the groups: Ray actors, SimPy processes, a test):

- :meth:`GroupScheduler.admit`: may a group be launched now, and which (a restart of a stale group
  first, else a new group of the task the task mix chooses)? ``None`` when the bound says wait.
- :meth:`GroupScheduler.complete`: a group finished, with its trajectories' oldest policy version.
- :meth:`GroupScheduler.fail`: a group finished with too few usable trajectories (never trained).
- :meth:`GroupScheduler.take_batch`: the trainer is free; stale groups are dropped or queued for a
  restart (and counted), then the ``B`` oldest fresh groups form the next step's batch, or none.
- :meth:`GroupScheduler.publish`: the rollout replicas now serve weights of this version.

Admission (docs/async.md): a new group is started only if, landing behind the groups already
outstanding, it would be trained by a step that starts at most ``k`` versions after the version the
rollouts now have::

    next_train_version + outstanding // B - published_version <= k

With ``k = 0`` this admits exactly ``B`` groups per published version and none while a step trains or
its weights sync: synchronous on-policy training, with no second code path. Admitted, untrained groups
never exceed ``(k + 1) · B``.

Batches: among the finished groups, those too stale for the step about to start (see
:mod:`rollarc.policy.freshness`) are never trained; of the fresh ones the oldest (smallest
``min_version``, then admission order) go first, so a slow group is not overtaken until it turns
stale. A group is trained whole or not at all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from rollarc.policy.freshness import is_fresh, max_in_flight_groups
from rollarc.policy.task_mix import TaskMix

OnStale = Literal["drop", "restart"]


@dataclass(frozen=True)
class Admission:
    """Launch group ``group`` of ``task``; ``restart``: it ran before and was too stale to train."""

    group: int
    task: str
    restart: bool = False


@dataclass(frozen=True)
class ReadyGroup:
    group: int
    task: str
    min_version: int


@dataclass(frozen=True)
class Batch:
    """The groups the step starting from ``train_version`` trains (it publishes ``train_version + 1``)."""

    train_version: int
    groups: tuple[ReadyGroup, ...]


@dataclass(frozen=True)
class BatchDecision:
    batch: Batch | None
    stale: tuple[ReadyGroup, ...]  # dropped, or queued for a restart (``on_stale``)


@dataclass
class SchedulerCounts:
    new_groups: int = 0
    restarts_admitted: int = 0
    trained: int = 0
    dropped_stale: int = 0
    restarted_stale: int = 0
    dropped_failed: int = 0
    dropped_by_task: Counter[str] = field(default_factory=Counter)


class GroupScheduler:
    def __init__(
        self,
        groups_per_step: int,
        max_staleness: int,
        task_weights: dict[str, float],
        *,
        on_stale: OnStale = "drop",
        start_version: int = 0,
        next_group: int = 0,
    ):
        if groups_per_step <= 0:
            raise ValueError(f"groups_per_step must be positive, got {groups_per_step}")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.on_stale: OnStale = on_stale
        self.mix = TaskMix(task_weights)
        self.mix.skip(next_group)  # resuming: the mix continues where the run left it
        self.next_group = next_group
        self.published_version = start_version
        self.next_train_version = start_version
        self.in_flight: dict[int, str] = {}  # admitted, not finished: group -> task
        self.ready: list[ReadyGroup] = []  # finished, not yet trained or discarded
        self.restart_queue: list[tuple[int, str]] = []
        self.counts = SchedulerCounts()

    # ---- the state ------------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Admitted groups that are neither trained nor discarded (running or waiting in the buffer)."""
        return len(self.in_flight) + len(self.ready)

    @property
    def max_in_flight(self) -> int:
        return max_in_flight_groups(self.groups_per_step, self.max_staleness)

    def can_admit(self) -> bool:
        ahead = self.outstanding // self.groups_per_step
        return self.next_train_version + ahead - self.published_version <= self.max_staleness

    # ---- events ---------------------------------------------------------------------------------------
    def requeue(self, group: int, task: str) -> None:
        """Group ``group`` was started before a checkpoint and never trained: launch it again first (resume)."""
        self.restart_queue.append((group, task))

    def rewind(self, version: int) -> list[int]:
        """Training goes back to ``version`` (the trainer was lost; a new one starts from its last checkpoint).

        Every group admitted and not trained (running, buffered, or queued for a restart) may hold tokens of
        versions that no longer exist: all are queued to run again first, oldest first. Returns their indices.
        """
        groups = sorted([*self.in_flight.items(), *((g.group, g.task) for g in self.ready), *self.restart_queue])
        self.in_flight, self.ready, self.restart_queue = {}, [], groups
        self.published_version = self.next_train_version = version
        return [group for group, _ in groups]

    def admit(self) -> Admission | None:
        """The next group to launch, or None while the staleness bound says wait."""
        if not self.can_admit():
            return None
        if self.restart_queue:
            group, task = self.restart_queue.pop(0)
            self.counts.restarts_admitted += 1
            admission = Admission(group, task, restart=True)
        else:
            group, task = self.next_group, self.mix.next()
            self.next_group += 1
            self.counts.new_groups += 1
            admission = Admission(group, task)
        self.in_flight[group] = task
        return admission

    def admit_all(self) -> list[Admission]:
        """Every group the bound admits now, in order."""
        admitted = []
        while (admission := self.admit()) is not None:
            admitted.append(admission)
        return admitted

    def complete(self, group: int, min_version: int) -> None:
        """Group ``group`` finished; ``min_version`` is the oldest version among its trajectories' tokens."""
        self.ready.append(ReadyGroup(group, self._finish(group), min_version))

    def fail(self, group: int) -> None:
        """Group ``group`` finished without enough usable trajectories: it will never be trained."""
        task = self._finish(group)
        self.counts.dropped_failed += 1
        self.counts.dropped_by_task[task] += 1

    def take_batch(self) -> BatchDecision:
        """Discard stale groups, then take the ``B`` oldest fresh ones for the next step if there are enough."""
        version = self.next_train_version
        fresh = [g for g in self.ready if is_fresh(version, g.min_version, self.max_staleness)]
        stale = tuple(g for g in self.ready if not is_fresh(version, g.min_version, self.max_staleness))
        for group in stale:
            self.counts.dropped_by_task[group.task] += 1
            if self.on_stale == "restart":
                self.counts.restarted_stale += 1
                self.restart_queue.append((group.group, group.task))
            else:
                self.counts.dropped_stale += 1
        if len(fresh) < self.groups_per_step:
            self.ready = fresh
            return BatchDecision(None, stale)
        fresh.sort(key=lambda g: (g.min_version, g.group))
        taken, self.ready = fresh[: self.groups_per_step], fresh[self.groups_per_step :]
        self.next_train_version += 1
        self.counts.trained += len(taken)
        return BatchDecision(Batch(version, tuple(taken)), stale)

    def publish(self, version: int) -> None:
        """The rollout replicas serve version ``version`` from now on."""
        if version < self.published_version:
            raise ValueError(f"published version went back from {self.published_version} to {version}")
        self.published_version = version

    def _finish(self, group: int) -> str:
        task = self.in_flight.pop(group, None)
        if task is None:
            raise ValueError(f"group {group} finished but it is not in flight (never admitted, or reported twice)")
        return task
