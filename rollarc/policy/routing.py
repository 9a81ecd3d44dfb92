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

from collections import OrderedDict
from dataclasses import dataclass


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
        pool_members: dict[str, list[ReplicaState]] | None = None,
    ) -> Route:
        """The replica for one turn. ``pool_members`` (each pool's replicas, as ``replicas`` holds them) is an
        index that spares a scan of every replica when the preferred pool has room; it changes no decision."""
        # Checked first: most turns are sticky, and this needs no scan of the replicas.
        if cache_key is not None and (name := self.sticky.get(cache_key)) is not None:
            replica = replicas.get(name)
            if replica is not None and replica.usable:
                self.sticky.move_to_end(cache_key)
                return Route(name, stolen=replica.pool != preferred_pool and preferred_pool is not None, sticky=True)
        if preferred_pool is not None and pool_members is not None:
            own = [r for r in pool_members.get(preferred_pool, ()) if r.usable]
        else:
            own = [r for r in replicas.values() if r.usable and (preferred_pool is None or r.pool == preferred_pool)]
        route = self._choose_fresh(replicas, own, preferred_pool)
        if cache_key is not None:
            self.sticky[cache_key] = route.replica
            self.sticky.move_to_end(cache_key)
            while len(self.sticky) > self.max_sticky:
                self.sticky.popitem(last=False)
        return route

    def _choose_fresh(
        self, replicas: dict[str, ReplicaState], own: list[ReplicaState], preferred_pool: str | None
    ) -> Route:
        if own:
            best = min(own, key=lambda r: (r.outstanding, r.name))
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
        best = min(usable, key=lambda r: (r.outstanding, r.name))
        return Route(best.name, stolen=preferred_pool is not None, sticky=False)

    def forget(self, replica: str) -> None:
        """Drop sticky entries of a replica that died or was removed."""
        for key in [k for k, v in self.sticky.items() if v == replica]:
            del self.sticky[key]

    def release(self, cache_key: str) -> None:
        self.sticky.pop(cache_key, None)
