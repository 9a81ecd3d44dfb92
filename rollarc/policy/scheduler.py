"""Admission, finished groups and training batches as one state machine with an explicit event API.

Events in (the driver reports them, whatever runs the groups: Ray actors, SimPy processes, a test):

- :meth:`GroupScheduler.admit`: may a group be launched now, and which (a restart first, else a new group
  of the task the task mix chooses)? ``None`` when the bound says wait or no remaining step could train it.
- :meth:`GroupScheduler.complete`: a group finished, with the oldest and newest policy versions of its tokens.
- :meth:`GroupScheduler.fail`: a group finished with too few usable trajectories (never trained).
- ``complete(..., signal=False)``: with dynamic sampling (:class:`DynamicSampling`, DAPO's), a group whose rewards
  are all equal carries no gradient: it is dropped like a failed one, so admission starts another in its place,
  until ``max_drops_per_step`` were dropped since the last batch; after that such groups are trained as they are
  (zero advantage) or the run stops (:class:`NoSignalError`), as configured.
- :meth:`GroupScheduler.take_batch`: the trainer is free; groups with no fresh token are dropped or queued for
  a restart (and counted), then the ``B`` earliest-admitted finished groups form the next step's batch, if
  overtaking stays within its bound, or none.
- :meth:`GroupScheduler.publish`: the rollout replicas now serve weights of this version.

Admission (docs/async.md): a new group is started only if, landing behind the groups already
outstanding, it would be trained by a step that starts at most ``k`` versions after the version the
rollouts now have, and by a step that exists (``total_steps``)::

    next_train_version + outstanding // B - published_version <= k
    next_train_version + outstanding // B < total_steps

With ``k = 0`` this admits exactly ``B`` groups per published version and none while a step trains or
its weights sync: synchronous on-policy training, with no second code path. Admitted, untrained groups
never exceed ``(k + 1) · B``, nor ``B`` per remaining step.

Batches follow admission order (the group index; a restarted group keeps its index, so its priority). A
batch is the ``B`` earliest-admitted finished groups, valid only if at most ``max_overtake`` unfinished
groups admitted before its last group are passed over: a group that finishes early overtakes at most
``max_overtake`` older running ones, and an overtaken group is first in line once it finishes. So which
groups are trained does not depend on which finish first beyond ``max_overtake`` groups per batch, and
each task's (or any label's) share of the trained groups follows its admitted share: the groups trained
by step ``n`` are the first ``n · B`` admitted, except at most ``max_overtake`` overtaken ones still
running (replaced by as many later ones) and the failed or dropped ones. A group is trained whole or not
at all; one whose every token is too stale for the step about to start (see
:mod:`rollarc.policy.freshness`) is never trained: it is dropped, or run again with fresh sampling seeds
at most ``max_restarts`` times (``on_stale: restart``).
"""

from __future__ import annotations

from bisect import insort
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from rollarc.policy.freshness import is_fresh, max_in_flight_groups
from rollarc.policy.task_mix import TaskMix

OnStale = Literal["drop", "restart"]
WhenExhausted = Literal["train", "stop"]

# How many unfinished older groups a batch may pass over (docs/async.md#batch-order): one straggler per
# step is skipped without stalling the trainer, and each batch stays within one group of admission order.
DEFAULT_MAX_OVERTAKE = 1
# How many times ``on_stale: restart`` runs one group again (fresh sampling seeds each time) before dropping it.
DEFAULT_MAX_RESTARTS = 1


@dataclass(frozen=True)
class DynamicSampling:
    """Drop groups with no reward signal before they reach a batch (DAPO), at most ``max_drops_per_step`` between
    two batches; past that, ``when_exhausted`` says whether they are trained as they are or the run stops."""

    max_drops_per_step: int
    when_exhausted: WhenExhausted = "train"

    def __post_init__(self) -> None:
        if self.max_drops_per_step < 0:
            raise ValueError(f"max_drops_per_step must be >= 0, got {self.max_drops_per_step}")


class NoSignalError(RuntimeError):
    """More groups without reward signal than dynamic sampling may drop before one batch, with ``stop``."""


@dataclass(frozen=True)
class Admission:
    """Launch group ``group`` of ``task``.

    ``restart``: it ran before (too stale to train, or its run was lost with a trainer or a resume).
    ``attempt``: how many times it was restarted for staleness; a driver samples each attempt with fresh seeds.
    """

    group: int
    task: str
    restart: bool = False
    attempt: int = 0


@dataclass(frozen=True)
class ReadyGroup:
    """A finished group: the oldest and newest policy versions among its tokens."""

    group: int
    task: str
    min_version: int
    max_version: int


@dataclass(frozen=True)
class Batch:
    """The groups the step starting from ``train_version`` trains (it publishes ``train_version + 1``).

    ``overtaken``: older groups still running that this batch passed over (at most ``max_overtake``).
    """

    train_version: int
    groups: tuple[ReadyGroup, ...]
    overtaken: tuple[int, ...] = ()


@dataclass(frozen=True)
class BatchDecision:
    batch: Batch | None
    stale: tuple[ReadyGroup, ...]  # no fresh token: dropped, or queued for a restart (``restarted``)
    restarted: tuple[int, ...] = ()  # those of ``stale`` queued to run again


@dataclass
class SchedulerCounts:
    new_groups: int = 0
    restarts_admitted: int = 0
    trained: int = 0
    dropped_stale: int = 0
    restarted_stale: int = 0
    dropped_failed: int = 0
    dropped_no_signal: int = 0  # dynamic sampling: all rewards equal, dropped before a batch
    kept_no_signal: int = 0  # dynamic sampling: all rewards equal, past the per-step cap, trained anyway
    overtaken: int = 0  # summed over batches: an unfinished group passed over by two batches counts twice
    dropped_by_task: Counter[str] = field(default_factory=Counter)


class GroupScheduler:
    def __init__(
        self,
        groups_per_step: int,
        max_staleness: int,
        task_weights: dict[str, float],
        *,
        max_overtake: int = DEFAULT_MAX_OVERTAKE,
        on_stale: OnStale = "drop",
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        total_steps: int | None = None,
        start_version: int = 0,
        next_group: int = 0,
        dynamic_sampling: DynamicSampling | None = None,
    ):
        if groups_per_step <= 0:
            raise ValueError(f"groups_per_step must be positive, got {groups_per_step}")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        if max_overtake < 0 or max_restarts < 0:
            raise ValueError(f"max_overtake and max_restarts must be >= 0, got {max_overtake}, {max_restarts}")
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.max_overtake = max_overtake
        self.on_stale: OnStale = on_stale
        self.max_restarts = max_restarts
        self.total_steps = total_steps
        self.mix = TaskMix(task_weights)
        self.mix.skip(next_group)  # resuming: the mix continues where the run left it
        self.next_group = next_group
        self.published_version = start_version
        self.next_train_version = start_version
        self.in_flight: dict[int, str] = {}  # admitted, not finished: group -> task
        self.ready: dict[int, ReadyGroup] = {}  # finished, not yet trained or discarded
        self.order: list[int] = []  # in_flight and ready, in admission order (group index)
        self.restart_queue: list[tuple[int, str]] = []
        self.attempts: dict[int, int] = {}  # stale restarts so far, of groups restarted at least once
        self.counts = SchedulerCounts()
        self.dynamic_sampling = dynamic_sampling
        self.no_signal_drops = 0  # dropped for no signal since the last batch (dynamic sampling's cap)
        # the freshness check: every ready group was fresh for ``_checked_version`` except those in ``_unchecked``
        self._checked_version = start_version
        self._unchecked: list[ReadyGroup] = []

    # ---- the state ------------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Admitted groups that are neither trained nor discarded (running or waiting in the buffer)."""
        return len(self.order)

    @property
    def max_in_flight(self) -> int:
        return max_in_flight_groups(self.groups_per_step, self.max_staleness)

    def can_admit(self) -> bool:
        """The staleness bound allows one more group, and some remaining step could train it."""
        step = self.next_train_version + len(self.order) // self.groups_per_step
        if self.total_steps is not None and step >= self.total_steps:
            return False
        return step - self.published_version <= self.max_staleness

    # ---- events ---------------------------------------------------------------------------------------
    def requeue(self, group: int, task: str) -> None:
        """Group ``group`` was started before a checkpoint and never trained: launch it again first (resume)."""
        self.restart_queue.append((group, task))

    def rewind(self, version: int) -> list[int]:
        """Training goes back to ``version`` (the trainer was lost; a new one starts from its last checkpoint).

        Every group admitted and not trained (running, buffered, or queued for a restart) may hold tokens of
        versions that no longer exist: all are queued to run again first, oldest first. Returns their indices.
        """
        groups = sorted(
            [*self.in_flight.items(), *((g.group, g.task) for g in self.ready.values()), *self.restart_queue]
        )
        self.in_flight, self.ready, self.order, self.restart_queue = {}, {}, [], groups
        self._unchecked = []
        self.no_signal_drops = 0
        self.published_version = self.next_train_version = version
        return [group for group, _ in groups]

    def admit(self) -> Admission | None:
        """The next group to launch, or None while the bound says wait (or no remaining step could train it)."""
        if not self.can_admit():
            return None
        if self.restart_queue:
            group, task = self.restart_queue.pop(0)
            self.counts.restarts_admitted += 1
            admission = Admission(group, task, restart=True, attempt=self.attempts.get(group, 0))
            insort(self.order, group)
        else:
            group, task = self.next_group, self.mix.next()
            self.next_group += 1
            self.counts.new_groups += 1
            admission = Admission(group, task)
            self.order.append(group)  # the newest index: the end of admission order
        self.in_flight[group] = task
        return admission

    def admit_all(self) -> list[Admission]:
        """Every group the bound admits now, in order."""
        admitted = []
        while (admission := self.admit()) is not None:
            admitted.append(admission)
        return admitted

    def complete(self, group: int, min_version: int, max_version: int | None = None, signal: bool = True) -> bool:
        """Group ``group`` finished; its tokens' versions span ``min_version .. max_version`` (None: all one).

        ``signal``: its rewards are not all equal. Returns False when dynamic sampling dropped it for having none.
        """
        task = self.in_flight.get(group)
        if task is None:
            raise ValueError(f"group {group} finished but it is not in flight (never admitted, or reported twice)")
        top = min_version if max_version is None else max_version
        if top < min_version:
            raise ValueError(f"group {group}: newest token version {top} is older than its oldest {min_version}")
        if not signal and self.dynamic_sampling is not None:
            rule = self.dynamic_sampling
            if self.no_signal_drops < rule.max_drops_per_step:
                del self.in_flight[group]
                self._forget(group)
                self.no_signal_drops += 1
                self.counts.dropped_no_signal += 1
                self.counts.dropped_by_task[task] += 1
                return False
            if rule.when_exhausted == "stop":
                raise NoSignalError(
                    f"{self.no_signal_drops} groups had all-equal rewards since the last batch (the dynamic sampling "
                    f"cap) and group {group} of task {task!r} too: the tasks give no learning signal at this policy"
                )
            self.counts.kept_no_signal += 1
        del self.in_flight[group]
        self.ready[group] = ready = ReadyGroup(group, task, min_version, top)
        self._unchecked.append(ready)
        return True

    def fail(self, group: int) -> None:
        """Group ``group`` finished without enough usable trajectories: it will never be trained."""
        task = self.in_flight.pop(group, None)
        if task is None:
            raise ValueError(f"group {group} finished but it is not in flight (never admitted, or reported twice)")
        self._forget(group)
        self.counts.dropped_failed += 1
        self.counts.dropped_by_task[task] += 1

    def take_batch(self) -> BatchDecision:
        """Discard groups with no fresh token, then take the next batch in admission order if there is one."""
        version = self.next_train_version
        # a group fresh for this version stays fresh until the version moves: only new ones need a look then
        candidates = self._unchecked if version == self._checked_version else self.ready.values()
        stale = tuple(
            g
            for g in candidates
            if self.ready.get(g.group) is g and not is_fresh(version, g.max_version, self.max_staleness)
        )
        self._checked_version, self._unchecked = version, []
        restarted = tuple(self._discard(group) for group in stale)
        decision = BatchDecision(None, stale, tuple(g for g in restarted if g is not None))
        if len(self.ready) < self.groups_per_step:
            return decision
        taken: list[ReadyGroup] = []
        passed: list[int] = []
        for group in self.order:
            ready = self.ready.get(group)
            if ready is not None:
                taken.append(ready)
                if len(taken) == self.groups_per_step:
                    break
            else:
                passed.append(group)
                if len(passed) > self.max_overtake:
                    return decision  # the oldest running groups hold the batch back: the bound
        if len(taken) < self.groups_per_step:
            return decision
        for done in taken:
            del self.ready[done.group]
            self.attempts.pop(done.group, None)
        cut = self.order.index(taken[-1].group) + 1
        self.order = passed + self.order[cut:]
        self.next_train_version += 1
        self.no_signal_drops = 0
        self.counts.trained += len(taken)
        self.counts.overtaken += len(passed)
        return BatchDecision(Batch(version, tuple(taken), tuple(passed)), stale, decision.restarted)

    def publish(self, version: int) -> None:
        """The rollout replicas serve version ``version`` from now on."""
        if version < self.published_version:
            raise ValueError(f"published version went back from {self.published_version} to {version}")
        self.published_version = version

    def _discard(self, group: ReadyGroup) -> int | None:
        """A finished group with no fresh token: queued to run again (returns its index) or dropped."""
        del self.ready[group.group]
        self._forget(group.group)
        attempt = self.attempts.get(group.group, 0)
        if self.on_stale == "restart" and attempt < self.max_restarts:
            self.attempts[group.group] = attempt + 1
            self.counts.restarted_stale += 1
            self.restart_queue.append((group.group, group.task))
            return group.group
        self.attempts.pop(group.group, None)
        self.counts.dropped_stale += 1
        self.counts.dropped_by_task[group.task] += 1
        return None

    def _forget(self, group: int) -> None:
        self.order.remove(group)
