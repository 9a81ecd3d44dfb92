"""The rollout replicas' membership and load, and the routing policy applied to every turn.

The Ray ``Router`` actor and the simulator both route through a :class:`Dispatcher`: a turn starts
with :meth:`Dispatcher.start_turn` (the policy chooses a replica and its load goes up) and ends with
:meth:`Dispatcher.finish_turn`. Keeping the load counters here, next to the policy that reads them,
is what lets the simulator make the runtime's routing decisions.
"""

from __future__ import annotations

from rollarc.policy.routing import LeastLoaded, ReplicaState, Route, RoutingPolicy


class Dispatcher:
    def __init__(self, task_pools: dict[str, str | None], steal_fraction: float = 0.5, max_sticky: int = 100_000):
        self.task_pools = dict(task_pools)
        self.policy = RoutingPolicy(steal_fraction=steal_fraction, max_sticky=max_sticky)
        self.replicas: dict[str, ReplicaState] = {}
        # the replicas by load, per pool, and all of them under None once a turn without a pool asks for them:
        # indexes of ``replicas`` for the policy
        self.loads: dict[str | None, LeastLoaded] = {}

    # ---- membership ----------------------------------------------------------------------------------
    def add_replica(self, name: str, pool: str, capacity: int) -> None:
        self.remove(name)
        state = ReplicaState(name=name, pool=pool, capacity=capacity)
        self.replicas[name] = state
        for index in self._indexes(pool):
            index.members.append(state)
            index.rebuild()

    def stop_accepting(self, name: str) -> ReplicaState | None:
        """No new turn goes to ``name`` (its running turns go on); returns its state, or None if unknown."""
        state = self.replicas.get(name)
        if state is not None:
            state.accepting = False
            self.policy.forget(name)
        return state

    def remove(self, name: str) -> None:
        state = self.replicas.pop(name, None)
        if state is not None:
            for index in self._indexes(state.pool):
                index.members.remove(state)
                index.rebuild()

    def mark_dead(self, name: str) -> bool:
        """Whether ``name`` was alive until now (a replica is counted dead once)."""
        state = self.replicas.get(name)
        if state is None or not state.alive:
            return False
        state.alive = False
        self.policy.forget(name)
        return True

    # ---- turns ---------------------------------------------------------------------------------------
    def preferred_pool(self, task: str | None) -> str | None:
        return self.task_pools.get(task) if task is not None else None

    def start_turn(self, cache_key: str | None, task: str | None) -> Route:
        """Choose the replica for one turn and count it as outstanding there until :meth:`finish_turn`."""
        preferred = self.preferred_pool(task)
        if preferred is None and None not in self.loads:
            self.loads[None] = LeastLoaded(list(self.replicas.values()))
            self.loads[None].rebuild()
        route = self.policy.choose(self.replicas, cache_key, preferred, self.loads)
        state = self.replicas[route.replica]
        state.outstanding += 1
        state.foreign += int(route.stolen)
        self._load_changed(state)
        return route

    def finish_turn(self, route: Route) -> None:
        state = self.replicas.get(route.replica)
        if state is not None:
            state.outstanding -= 1
            state.foreign -= int(route.stolen)
            self._load_changed(state)

    def _indexes(self, pool: str) -> list[LeastLoaded]:
        """The load indexes a replica of ``pool`` belongs to (its pool's, and the one of all replicas if kept)."""
        indexes = [self.loads.setdefault(pool, LeastLoaded())]
        if None in self.loads:
            indexes.append(self.loads[None])
        return indexes

    def _load_changed(self, state: ReplicaState) -> None:
        self.loads[state.pool].changed(state)  # (no list of indexes built: this runs twice per turn)
        everything = self.loads.get(None)
        if everything is not None:
            everything.changed(state)

    def release(self, cache_key: str) -> None:
        """A trajectory ended: its prefix need not stick to a replica any more."""
        self.policy.release(cache_key)

    def sticky_replica(self, cache_key: str) -> str | None:
        return self.policy.sticky.get(cache_key)
