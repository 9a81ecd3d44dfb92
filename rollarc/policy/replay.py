"""Replay one recorded event sequence through any driver of the scheduling core, and record its decisions.

A *driver* is what turns a world's happenings into calls on the core: the Ray controller and router
(:class:`rollarc.runtime.scheduling.RuntimeScheduling`), the simulator
(:class:`rollarc.sim.scheduling.SimScheduling`) or :class:`InProcessDriver` here. Each driver implements
:class:`SchedulingDriver` with the very methods its world calls, so replaying the same events through
two drivers and comparing the :class:`Decisions` shows that they schedule alike: the same admissions,
batches and routes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.routing import Route
from rollarc.policy.scheduler import Admission, Batch, GroupScheduler


@dataclass(frozen=True)
class GroupDone:
    """Every trajectory of ``group`` finished; their tokens' versions span ``min_version .. max_version``."""

    group: int
    min_version: int
    max_version: int


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


Event = GroupDone | TrainerFree | WeightsPublished | TurnStarts | TurnEnds | TrajectoryEnds


class SchedulingDriver(Protocol):
    def admissions(self) -> list[Admission]:
        """Launch every group the core admits now."""
        ...

    def group_done(self, group: int, min_version: int, max_version: int) -> None: ...

    def trainer_free(self) -> Batch | None: ...

    def weights_published(self, version: int) -> None: ...

    def turn_starts(self, trajectory: str, task: str) -> str:
        """The replica that serves the trajectory's next turn."""
        ...

    def turn_ends(self, trajectory: str) -> None: ...

    def trajectory_ends(self, trajectory: str) -> None: ...


@dataclass
class Decisions:
    admissions: list[Admission] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    routes: list[tuple[str, str]] = field(default_factory=list)  # (trajectory, replica), one per turn


def replay(driver: SchedulingDriver, events: list[Event]) -> Decisions:
    """Feed ``events`` to ``driver`` in order, admitting after each one as every driver does."""
    decisions = Decisions()
    decisions.admissions += driver.admissions()
    for event in events:
        match event:
            case GroupDone(group, min_version, max_version):
                driver.group_done(group, min_version, max_version)
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
        decisions.admissions += driver.admissions()
    return decisions


class InProcessDriver:
    """The plainest driver: the core's objects called directly (for tests and reasoning by hand)."""

    def __init__(self, scheduler: GroupScheduler, dispatcher: Dispatcher):
        self.scheduler = scheduler
        self.dispatcher = dispatcher
        self.turns: dict[str, Route] = {}

    def admissions(self) -> list[Admission]:
        return self.scheduler.admit_all()

    def group_done(self, group: int, min_version: int, max_version: int) -> None:
        self.scheduler.complete(group, min_version, max_version)

    def trainer_free(self) -> Batch | None:
        return self.scheduler.take_batch().batch

    def weights_published(self, version: int) -> None:
        self.scheduler.publish(version)

    def turn_starts(self, trajectory: str, task: str) -> str:
        route = self.dispatcher.start_turn(trajectory, task)
        self.turns[trajectory] = route
        return route.replica

    def turn_ends(self, trajectory: str) -> None:
        route = self.turns.pop(trajectory)
        self.dispatcher.finish_turn(route)

    def trajectory_ends(self, trajectory: str) -> None:
        self.dispatcher.release(trajectory)
