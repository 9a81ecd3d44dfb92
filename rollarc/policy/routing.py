"""Which rollout replica serves a turn: a pure policy, applied by the :class:`~rollarc.policy.dispatcher.Dispatcher`
(inside the Ray Router actor and inside the simulator alike).

Rules, in order:
1. **Sticky prefix.** A trajectory's turns go to the replica that served its previous turn, which holds
   its KV prefix, while that replica is alive and accepting.
2. **Preferred pool.** A task's turns go to its preferred pool (hardware affinity); without a
   preference, every accepting replica is a candidate.
3. **Least loaded** inside the pool (fewest outstanding requests; ties by name, so it is deterministic).
4. **Bounded work stealing.** When every replica of the preferred pool is full (outstanding >=
   capacity, so requests would queue) and a replica of another pool is under half its capacity, the
   turn goes there, as long as that replica's foreign (stolen) requests stay under
   ``steal_fraction × capacity``. No pool idles while another queues, and stolen work never crowds
   out a pool's own tasks.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field


class NoReplicaError(RuntimeError):
    """No rollout replica is alive and accepting requests."""


@dataclass
class ReplicaState:
    name: str
    pool: str
    capacity: int
    outstanding: int = 0
    foreign: int = 0
    alive: bool = True
    accepting: bool = True

    @property
    def usable(self) -> bool:
        return self.alive and self.accepting


@dataclass
class LeastLoaded:
    """The usable replicas of one pool (or of all, under ``None``) ordered by ``(outstanding, name)``.

    The least loaded is then found in ``O(log n)`` instead of a scan of the pool on every new trajectory (the
    simulator routes tens of thousands of them over hundreds of replicas). Entries are pushed on every load
    change and the outdated ones are skipped lazily, so the answer is exactly the scan's ``min``.
    """

    members: list[ReplicaState] = field(default_factory=list)
    heap: list[tuple[int, str, int, ReplicaState]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def rebuild(self) -> None:
        self.heap = [(r.outstanding, r.name, next(self._seq), r) for r in self.members if r.usable]
        heapq.heapify(self.heap)

    def changed(self, replica: ReplicaState) -> None:
        """``replica``'s load changed: its new entry outranks (or ties) the old one, which is skipped later."""
        if replica.usable:
            heapq.heappush(self.heap, (replica.outstanding, replica.name, next(self._seq), replica))
            if len(self.heap) > 4 * len(self.members) + 64:
                self.rebuild()

    def least_loaded(self) -> ReplicaState | None:
        heap = self.heap
        while heap:
            outstanding, _name, _seq, replica = heap[0]
            if replica.outstanding == outstanding and replica.usable:
                return replica
            heapq.heappop(heap)
        return None


@dataclass(frozen=True)
class Route:
    replica: str
    stolen: bool
    sticky: bool


class RoutingPolicy:
    def __init__(self, steal_fraction: float = 0.5, max_sticky: int = 100_000):
        self.steal_fraction = steal_fraction
        self.max_sticky = max_sticky
        self.sticky: OrderedDict[str, str] = OrderedDict()

    def choose(
        self,
        replicas: dict[str, ReplicaState],
        cache_key: str | None,
        preferred_pool: str | None,
        loads: dict[str | None, LeastLoaded] | None = None,
    ) -> Route:
        """The replica for one turn. ``loads`` (each pool's replicas by load, and all of them under ``None``, as
        ``replicas`` holds them) is an index that spares a scan of the replicas; it changes no decision."""
        # Checked first: most turns are sticky, and this needs no scan of the replicas.
        if cache_key is not None and (name := self.sticky.get(cache_key)) is not None:
            replica = replicas.get(name)
            if replica is not None and replica.usable:
                self.sticky.move_to_end(cache_key)
                return Route(name, stolen=replica.pool != preferred_pool and preferred_pool is not None, sticky=True)
        if loads is not None:
            index = loads.get(preferred_pool)
            best = index.least_loaded() if index is not None else None
        else:
            own = [r for r in replicas.values() if r.usable and (preferred_pool is None or r.pool == preferred_pool)]
            best = min(own, key=lambda r: (r.outstanding, r.name)) if own else None
        route = self._choose_fresh(replicas, best, preferred_pool)
        if cache_key is not None:
            self.sticky[cache_key] = route.replica
            self.sticky.move_to_end(cache_key)
            while len(self.sticky) > self.max_sticky:
                self.sticky.popitem(last=False)
        return route

    def _choose_fresh(
        self, replicas: dict[str, ReplicaState], best: ReplicaState | None, preferred_pool: str | None
    ) -> Route:
        """``best``: the least loaded usable replica of the preferred pool (of all, without one), or None."""
        if best is not None:
            if best.outstanding < best.capacity:
                return Route(best.name, stolen=False, sticky=False)
            thieves = [
                r
                for r in replicas.values()
                if r.usable
                and r.pool != preferred_pool
                and r.outstanding * 2 < r.capacity
                and r.foreign < self.steal_fraction * r.capacity
            ]
            if thieves:
                victim = min(thieves, key=lambda r: (r.outstanding, r.name))
                return Route(victim.name, stolen=True, sticky=False)
            return Route(best.name, stolen=False, sticky=False)
        # The preferred pool has no usable replica at all: serve anywhere rather than fail.
        usable = [r for r in replicas.values() if r.usable]
        if not usable:
            raise NoReplicaError("no rollout replica is alive and accepting requests")
        anywhere = min(usable, key=lambda r: (r.outstanding, r.name))
        return Route(anywhere.name, stolen=preferred_pool is not None, sticky=False)

    def forget(self, replica: str) -> None:
        """Drop sticky entries of a replica that died or was removed."""
        for key in [k for k, v in self.sticky.items() if v == replica]:
            del self.sticky[key]

    def release(self, cache_key: str) -> None:
        self.sticky.pop(cache_key, None)
