"""The training loop's step cycle as a pure state machine: given what happened, what the driver does next.

:class:`~rollarc.policy.scheduler.GroupScheduler` decides which group to launch and which finished groups
form a batch. Around it a run has a step cycle, whose decisions lived in the Ray loop of ``Controller.run``
and, in part, again in the simulator's trainer process: a batch is taken only while no step is in flight;
a trained step's weights are published, then synced to every replica, and only then does the version move
on; held-out evaluations and checkpoints follow ``train.eval_every`` and ``train.checkpoint_every``; the
next groups start before a step's bookkeeping unless that bookkeeping evaluates (live, not deferred),
checkpoints or resizes the rollout fleet; at the last version the groups still running are cancelled and the run is evaluated and
checkpointed one last time; a lost trainer sends the cycle back to the version it is restored at.

:class:`StepPlan` holds that cycle, as vLLM's scheduler holds its engine's. A driver (the Ray controller,
the simulator, a test) reports events (:meth:`StepPlan.start`, :meth:`~StepPlan.trained`,
:meth:`~StepPlan.published`, :meth:`~StepPlan.synced`, :meth:`~StepPlan.trainer_lost`; finished groups go
to the scheduler), and calls :meth:`StepPlan.schedule` until it returns no action, carrying out each action
in order. States (``phase``)::

    start --start()--> idle --schedule: Train--> training --trained()--> publishing --published()--> published
    published --schedule: Sync--> syncing --synced()--> stepped --schedule: StepDone (Checkpoint, Resize)--> idle
    idle at version train.steps --schedule: CancelInFlight, Evaluate, Checkpoint(final), Finish--> done
    any --trainer_lost(v)--> idle at version v

In every phase but ``start`` and ``done``, :meth:`~StepPlan.schedule` also launches the groups the scheduler
admits (in ``idle`` after the batch decision, which discards the finished groups with no fresh token and may
queue some of them to run again first; in ``stepped`` before the step's bookkeeping, when that may go first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollarc.policy.scheduler import Admission, Batch, GroupScheduler, ReadyGroup

Phase = Literal["start", "idle", "training", "publishing", "published", "syncing", "stepped", "done"]


@dataclass(frozen=True)
class Launch:
    """Start these groups, in order (a restart runs its group again)."""

    admissions: tuple[Admission, ...]


@dataclass(frozen=True)
class DropStale:
    """A finished group with no fresh token leaves the buffer; ``restart``: it is queued to run again."""

    group: ReadyGroup
    restart: bool


@dataclass(frozen=True)
class Train:
    """Train one step on ``batch``, then publish its weights (version ``batch.train_version + 1``)."""

    batch: Batch


@dataclass(frozen=True)
class Sync:
    """Send the published weights of ``version`` to every rollout replica."""

    version: int


@dataclass(frozen=True)
class StepDone:
    """Every replica serves ``version``: record the step, after a held-out evaluation when ``evaluate``."""

    version: int
    evaluate: bool = False


@dataclass(frozen=True)
class Evaluate:
    """A held-out evaluation outside the step cycle: ``before_rl`` or ``after_rl``."""

    version: int
    label: str


@dataclass(frozen=True)
class Checkpoint:
    """Save the trainer and the run's state at ``version``; ``final``: the run's last."""

    version: int
    final: bool = False


@dataclass(frozen=True)
class Resize:
    """Apply the rollout fleet's changes scheduled at ``version`` (nothing trains, publishes or syncs now)."""

    version: int


@dataclass(frozen=True)
class CancelInFlight:
    """The run ends: cancel the groups still running (they can no longer be trained)."""


@dataclass(frozen=True)
class Finish:
    """The run is complete at ``version``."""

    version: int


Action = Launch | DropStale | Train | Sync | StepDone | Evaluate | Checkpoint | Resize | CancelInFlight | Finish


@dataclass(frozen=True)
class Cadence:
    """When a run evaluates and checkpoints (every ``eval_every`` / ``checkpoint_every`` versions; 0: never) and
    after which versions its rollout fleet changes (``resize_at``). ``bookends``: evaluate before RL, and end
    with an evaluation and a final checkpoint (the runtime does; the simulator does neither). ``eval_deferred``:
    a step's evaluation only snapshots its weights (scored later, off the rollout workers), so it does not hold
    back the next groups."""

    eval_every: int = 0
    checkpoint_every: int = 0
    resize_at: frozenset[int] = frozenset()
    bookends: bool = True
    eval_deferred: bool = False

    def __post_init__(self) -> None:
        if self.eval_every < 0 or self.checkpoint_every < 0:
            raise ValueError(
                f"eval_every and checkpoint_every must be >= 0, got {self.eval_every} and {self.checkpoint_every}"
            )


class StepPlan:
    """The step cycle of one run around its :class:`GroupScheduler` (whose ``total_steps`` is the last version)."""

    def __init__(self, scheduler: GroupScheduler, cadence: Cadence | None = None):
        if scheduler.total_steps is None:
            raise ValueError("a StepPlan needs a GroupScheduler with total_steps (the run's last version)")
        self.scheduler = scheduler
        self.total_steps: int = scheduler.total_steps
        self.cadence = cadence or Cadence()
        self.phase: Phase = "start"
        self.batch: Batch | None = None  # the step in flight
        self.buffer_peak = 0  # the most finished groups waiting in the buffer when a batch was formed or tried

    # ---- the state ------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The version every rollout replica serves (the steps taken)."""
        return self.scheduler.published_version

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def moving_weights(self) -> bool:
        """A step's weights are being published or synced: a replica replaced now would miss them."""
        return self.phase in ("publishing", "published", "syncing")

    # ---- events ---------------------------------------------------------------------------------------
    def start(self, evaluated: bool = False) -> list[Action]:
        """The run begins at the scheduler's version; ``evaluated``: a resumed run already holds evaluations."""
        self._expect("start", "start")
        self.phase = "idle"
        if self.cadence.bookends and (self.version == 0 or not evaluated):
            return [Evaluate(self.version, "before_rl")]
        return []

    def trained(self) -> None:
        """The step in flight has trained; its weights are being published."""
        self._expect("trained", "training")
        self.phase = "publishing"

    def published(self) -> None:
        """The trainer published the step's weights: they can be synced."""
        self._expect("published", "publishing")
        self.phase = "published"

    def synced(self) -> None:
        """Every rollout replica now serves the step's weights: the version moves on."""
        self._expect("synced", "syncing")
        assert self.batch is not None  # set with the Train action, kept until here
        self.scheduler.publish(self.batch.train_version + 1)
        self.batch = None
        self.phase = "stepped"

    def trainer_lost(self, version: int) -> list[int]:
        """The trainer was lost and a new one starts from ``version``: whatever step was in flight is gone, and the
        groups admitted but not trained run again first (their indices, oldest first)."""
        if self.phase == "start":
            raise ValueError("trainer_lost before start(): the run has not begun")
        self.batch = None
        self.phase = "idle"
        return self.scheduler.rewind(version)

    # ---- decisions ------------------------------------------------------------------------------------
    def schedule(self) -> list[Action]:
        """The actions to carry out now, in order; call again until it returns none."""
        match self.phase:
            case "start":
                raise ValueError("schedule() before start(): the run has not begun")
            case "done":
                return []
            case "stepped":
                return self._bookkeeping()
            case "published":
                assert self.batch is not None
                self.phase = "syncing"
                return [Sync(self.batch.train_version + 1), *self._launch()]
            case "idle":
                return self._next_step()
            case _:
                return self._launch()

    def _launch(self) -> list[Action]:
        admissions = self.scheduler.admit_all()
        return [Launch(tuple(admissions))] if admissions else []

    def _bookkeeping(self) -> list[Action]:
        """After a step: its record, and the evaluation, checkpoint and fleet change due at its version."""
        version, cadence = self.version, self.cadence
        evaluate = bool(cadence.eval_every) and version % cadence.eval_every == 0 and version < self.total_steps
        checkpoint = bool(cadence.checkpoint_every) and version % cadence.checkpoint_every == 0
        resize = version in cadence.resize_at
        self.phase = "idle"
        # Admission needs only the published version: the next groups start while the step is recorded, unless
        # the bookkeeping evaluates live (it uses the rollout workers; a deferred one only snapshots the weights),
        # checkpoints (it records the admitted groups) or resizes the fleet, or the run ends.
        live_eval = evaluate and not cadence.eval_deferred
        early = version < self.total_steps and not (live_eval or checkpoint or resize)
        actions: list[Action] = [*self._launch()] if early else []
        actions.append(StepDone(version, evaluate))
        if checkpoint:
            actions.append(Checkpoint(version))
        if resize:
            actions.append(Resize(version))
        return actions

    def _next_step(self) -> list[Action]:
        """No step in flight: the end of the run, or the stale groups' discard and the next batch if one forms."""
        version = self.version
        if version >= self.total_steps:
            self.phase = "done"
            if not self.cadence.bookends:
                return [CancelInFlight(), Finish(version)]
            return [CancelInFlight(), Evaluate(version, "after_rl"), Checkpoint(version, final=True), Finish(version)]
        decision = self.scheduler.take_batch()
        waiting = len(self.scheduler.ready) + (len(decision.batch.groups) if decision.batch is not None else 0)
        self.buffer_peak = max(self.buffer_peak, waiting)
        actions: list[Action] = [DropStale(group, group.group in decision.restarted) for group in decision.stale]
        if decision.batch is not None:
            self.batch = decision.batch
            self.phase = "training"
            actions.append(Train(decision.batch))
        # then the groups the bound admits now, the discarded groups queued to run again first
        return actions + self._launch()

    def _expect(self, event: str, phase: Phase) -> None:
        if self.phase != phase:
            raise ValueError(f"step plan: {event}() in phase {self.phase!r}, expected {phase!r}")
