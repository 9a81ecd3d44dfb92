"""Replay one recorded event sequence through any driver of the scheduling core, and record its decisions.

A *driver* is what turns a world's happenings into calls on the core: the simulator's
(:class:`rollarc.sim.scheduling.SimScheduling`, the very methods the Simulation calls) or
:class:`InProcessDriver` here, which calls the core's objects directly. The runtime's decisions replay through
:class:`InProcessDriver` over the objects the runtime itself builds: ``RuntimeScheduling(cfg).core`` (the
Controller's scheduler) and the Router's dispatcher (``make_dispatcher``). Replaying the same events through
two drivers and comparing the :class:`Decisions` shows that they schedule alike: the same admissions,
batches and routes.

Borrowed capacity replays too: a :class:`Headroom` event is one co-serving replica's report, on which a
:class:`LendingDriver` acts as the HarvestPool does (:meth:`LendingPolicy.step`: lend, resize or withdraw); a
withdrawal's moved turns are recorded in :attr:`Decisions.migrations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.lending import Decision, LendingPolicy
from rollarc.policy.routing import Route
from rollarc.policy.scheduler import Admission, Batch, GroupScheduler


@dataclass(frozen=True)
class GroupDone:
    """Every trajectory of ``group`` finished; their tokens' versions span ``min_version .. max_version``."""

    group: int
    min_version: int
    max_version: int
    signal: bool = True  # its rewards are not all equal (dynamic sampling drops those that are)


@dataclass(frozen=True)
class TrainerFree:
    """The trainer finished its step and the new weights are on the replicas: it may take a batch."""


@dataclass(frozen=True)
class WeightsPublished:
    version: int


@dataclass(frozen=True)
class TurnStarts:
    trajectory: str
    task: str


@dataclass(frozen=True)
class TurnEnds:
    trajectory: str


@dataclass(frozen=True)
class TrajectoryEnds:
    trajectory: str


@dataclass(frozen=True)
class Headroom:
    """Co-serving replica ``replica`` reported ``capacity`` (the rollout turns its SLO guard admits) at ``time`` s."""

    replica: str
    capacity: int
    time: float


Event = GroupDone | TrainerFree | WeightsPublished | TurnStarts | TurnEnds | TrajectoryEnds | Headroom


class SchedulingDriver(Protocol):
    def admissions(self) -> list[Admission]:
        """Launch every group the core admits now."""
        ...

    def group_done(self, group: int, min_version: int, max_version: int, signal: bool = True) -> None: ...

    def trainer_free(self) -> Batch | None: ...

    def weights_published(self, version: int) -> None: ...

    def turn_starts(self, trajectory: str, task: str) -> str:
        """The replica that serves the trajectory's next turn."""
        ...

    def turn_ends(self, trajectory: str) -> None: ...

    def trajectory_ends(self, trajectory: str) -> None: ...


@runtime_checkable
class LendingDriver(SchedulingDriver, Protocol):
    """A driver that also lends co-serving replicas (the simulator has none: it replays no :class:`Headroom`)."""

    def headroom(self, replica: str, capacity: int, now: float) -> tuple[Decision | None, list[tuple[str, str]]]:
        """The lending decision on one headroom report, and the turns it moved: ``(trajectory, new replica)``."""
        ...


@dataclass
class Decisions:
    admissions: list[Admission] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    routes: list[tuple[str, str]] = field(default_factory=list)  # (trajectory, replica), one per turn
    lending: list[tuple[str, Decision]] = field(default_factory=list)  # (replica, "lend" or "withdraw")
    migrations: list[tuple[str, str]] = field(default_factory=list)  # (trajectory, replica it moved to)


def replay(driver: SchedulingDriver, events: list[Event]) -> Decisions:
    """Feed ``events`` to ``driver`` in order, admitting after each one as every driver does."""
    decisions = Decisions()
    decisions.admissions += driver.admissions()
    for event in events:
        match event:
            case GroupDone(group, min_version, max_version, signal):
                driver.group_done(group, min_version, max_version, signal)
            case TrainerFree():
                batch = driver.trainer_free()
                if batch is not None:
                    decisions.batches.append(batch)
            case WeightsPublished(version):
                driver.weights_published(version)
            case TurnStarts(trajectory, task):
                decisions.routes.append((trajectory, driver.turn_starts(trajectory, task)))
            case TurnEnds(trajectory):
                driver.turn_ends(trajectory)
            case TrajectoryEnds(trajectory):
                driver.trajectory_ends(trajectory)
            case Headroom(replica, capacity, time):
                if not isinstance(driver, LendingDriver):
                    raise TypeError(f"{type(driver).__name__} lends no replica: it cannot replay {event}")
                decision, moved = driver.headroom(replica, capacity, time)
                if decision is not None:
                    decisions.lending.append((replica, decision))
                decisions.migrations += moved
        decisions.admissions += driver.admissions()
    return decisions


class InProcessDriver:
    """The plainest driver: the core's objects called directly (the runtime's, as it builds them, or any other).

    Borrowed replicas: ``lending`` holds one :class:`LendingPolicy` per co-serving replica, which joins the
    dispatcher's ``borrowed_pool`` when lent. Withdrawn, it takes no new turn; the turns it was running come back
    and are routed again at once (the Router aborts them and the agent loops retry them), so a migration is
    recorded as the new route of its trajectory.
    """

    def __init__(
        self, scheduler: GroupScheduler, dispatcher: Dispatcher, lending: dict[str, LendingPolicy] | None = None
    ):
        self.scheduler = scheduler
        self.dispatcher = dispatcher
        self.lending = dict(lending or {})
        self.turns: dict[str, Route] = {}
        self.tasks: dict[str, str] = {}  # trajectory -> the task of its turn in flight

    def admissions(self) -> list[Admission]:
        return self.scheduler.admit_all()

    def group_done(self, group: int, min_version: int, max_version: int, signal: bool = True) -> None:
        self.scheduler.complete(group, min_version, max_version, signal)

    def trainer_free(self) -> Batch | None:
        return self.scheduler.take_batch().batch

    def weights_published(self, version: int) -> None:
        self.scheduler.publish(version)

    def turn_starts(self, trajectory: str, task: str) -> str:
        route = self.dispatcher.start_turn(trajectory, task)
        self.turns[trajectory] = route
        self.tasks[trajectory] = task
        return route.replica

    def turn_ends(self, trajectory: str) -> None:
        route = self.turns.pop(trajectory)
        self.tasks.pop(trajectory)
        self.dispatcher.finish_turn(route)

    def headroom(self, replica: str, capacity: int, now: float) -> tuple[Decision | None, list[tuple[str, str]]]:
        """What the HarvestPool's lending step tells the Router, applied to the dispatcher as the Router applies it
        (a withdrawal with no drain: every running turn is aborted and routed again)."""
        action = self.lending[replica].step(now, capacity)
        moved: list[tuple[str, str]] = []
        if action == "lend":
            self.dispatcher.add_replica(replica, self.dispatcher.borrowed_pool, capacity)
        elif action == "withdraw":
            self.dispatcher.stop_accepting(replica)
            for trajectory in sorted(t for t, route in self.turns.items() if route.replica == replica):
                self.dispatcher.finish_turn(self.turns.pop(trajectory))
                moved.append((trajectory, self.turn_starts(trajectory, self.tasks[trajectory])))
            self.dispatcher.remove(replica)
        elif action == "resize":
            self.dispatcher.set_capacity(replica, capacity)
        return (action if action != "resize" else None), moved

    def trajectory_ends(self, trajectory: str) -> None:
        self.dispatcher.release(trajectory)
