"""The elastic rollout scheduler: which worker runs a trajectory's next turn.

Workers are *dedicated* (rollout only) or *borrowed* (a co-serving worker lending its idle time). Each
has a capacity, the turns it may run at once: fixed for a dedicated worker, provisioned for a borrowed
one from the headroom it measures (:meth:`CoServingExecutor.capacity`) and set to 0 when serving load
rises (the worker is then withdrawn: its turns come back here and migrate).

Routing of a ready turn, in order:

1. **cache affinity**: the worker that ran the trajectory's previous turn holds its prefix in its KV
   cache, so the turn goes there when that worker has a free place;
2. otherwise the dedicated worker with the most free places; then the borrowed one with the most;
3. otherwise it waits in the queue (first in, first out).

A worker that disappears (:meth:`lose`) gives its in-flight turns back to the head of the queue; they
restart elsewhere (the progress a lost worker made is lost with it). Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

WorkerKind = Literal["dedicated", "borrowed"]


@dataclass
class WorkerSlot:
    name: str
    kind: WorkerKind
    capacity: int
    in_flight: set[str] = field(default_factory=set)

    @property
    def free(self) -> int:
        return max(0, self.capacity - len(self.in_flight))


@dataclass(frozen=True)
class Assignment:
    turn_id: str
    traj_id: str
    worker: str
    affinity: bool  # the worker holds the trajectory's prefix


class HarvestScheduler:
    def __init__(self) -> None:
        self.workers: dict[str, WorkerSlot] = {}
        self.queue: deque[tuple[str, str]] = deque()  # (turn_id, traj_id) ready to run
        self.where: dict[str, str] = {}  # traj_id -> worker of its last turn
        self.placed: dict[str, tuple[str, str]] = {}  # turn_id -> (traj_id, worker)
        self.counters: dict[str, int] = {
            "dispatched": 0,
            "dispatched_borrowed": 0,
            "affinity_hits": 0,
            "affinity_misses": 0,
            "migrations": 0,
            "lost_workers": 0,
            "lost_turns": 0,
        }

    # ----------------------------------------------------------------- workers
    def add_worker(self, name: str, kind: WorkerKind, capacity: int) -> None:
        if name in self.workers:
            raise ValueError(f"worker {name!r} is already registered")
        self.workers[name] = WorkerSlot(name, kind, max(0, capacity))

    def set_capacity(self, name: str, capacity: int) -> None:
        """Provision (or shrink) a borrowed worker from its measured headroom."""
        self.workers[name].capacity = max(0, capacity)

    def withdraw(self, name: str, turns: list[tuple[str, str]]) -> None:
        """The worker stops lending: ``turns`` (its in-flight ``(turn_id, traj_id)``) migrate to the queue head."""
        worker = self.workers[name]
        worker.capacity = 0
        for turn_id, traj_id in reversed(turns):
            worker.in_flight.discard(turn_id)
            self.placed.pop(turn_id, None)
            if self.where.get(traj_id) == name:
                del self.where[traj_id]  # its prefix is no longer worth going back for
            self.queue.appendleft((turn_id, traj_id))
        self.counters["migrations"] += len(turns)

    def lose(self, name: str) -> list[str]:
        """The worker disappeared: its in-flight turns go back to the queue head; returns their ids."""
        worker = self.workers.pop(name)
        lost = sorted(worker.in_flight)
        for turn_id in reversed(lost):
            traj_id, _ = self.placed.pop(turn_id)
            self.queue.appendleft((turn_id, traj_id))
        for traj_id in [t for t, w in self.where.items() if w == name]:
            del self.where[traj_id]
        self.counters["lost_workers"] += 1
        self.counters["lost_turns"] += len(lost)
        return lost

    # ----------------------------------------------------------------- turns
    def submit(self, turn_id: str, traj_id: str) -> None:
        self.queue.append((turn_id, traj_id))

    def complete(self, turn_id: str) -> str:
        """A turn finished; returns the worker that ran it (the trajectory's affinity from now on)."""
        traj_id, name = self.placed.pop(turn_id)
        if name in self.workers:
            self.workers[name].in_flight.discard(turn_id)
            self.where[traj_id] = name
        return name

    def dispatch(self) -> list[Assignment]:
        """Place queued turns on workers with free places (affinity first); the rest keep waiting."""
        out: list[Assignment] = []
        waiting: deque[tuple[str, str]] = deque()
        while self.queue:
            turn_id, traj_id = self.queue.popleft()
            worker = self._choose(traj_id)
            if worker is None:
                waiting.append((turn_id, traj_id))
                continue
            affinity = self.where.get(traj_id) == worker.name
            worker.in_flight.add(turn_id)
            self.placed[turn_id] = (traj_id, worker.name)
            self.counters["dispatched"] += 1
            self.counters["dispatched_borrowed"] += worker.kind == "borrowed"
            if traj_id in self.where:
                self.counters["affinity_hits" if affinity else "affinity_misses"] += 1
            out.append(Assignment(turn_id, traj_id, worker.name, affinity))
        self.queue = waiting
        return out

    def _choose(self, traj_id: str) -> WorkerSlot | None:
        home = self.workers.get(self.where.get(traj_id, ""))
        if home is not None and home.free > 0:
            return home
        for kind in ("dedicated", "borrowed"):
            candidates = [w for w in self.workers.values() if w.kind == kind and w.free > 0]
            if candidates:
                return max(candidates, key=lambda w: (w.free, w.name))
        return None
