"""The rollout replicas' membership, load and capacity, and the routing policy applied to every turn.

The Ray ``Router`` actor, the simulator and the ROSE benchmark's driver all route through a
:class:`Dispatcher`: a turn starts with :meth:`Dispatcher.start_turn` (the policy chooses a replica and its
load goes up) and ends with :meth:`Dispatcher.finish_turn`. Keeping the load counters here, next to the
policy that reads them, is what lets every driver make the same routing decisions.

Borrowed capacity (ROSE, docs/rose.md) adds these, all here so that there is one routing decision:

- **capacity from headroom**: :meth:`set_capacity` updates a replica's capacity from the headroom it reports
  (a co-serving replica admits only as many rollout turns as its SLO guard allows);
- **a hard limit for borrowed replicas** (``hard_pools``): a replica of such a pool takes a turn only while
  ``outstanding < capacity``; the others take the rest. The Router keeps ``borrowed`` hard, so a lent
  co-serving replica never holds more turns than its guard last admitted, and training runs need no queue;
- **dedicated first** (``dedicated_first``): a turn with no cached prefix to go back to prefers a replica
  outside ``borrowed_pool`` while one has room, so borrowed capacity only takes what dedicated capacity cannot.
  An option, not a rule: which order wins is a measurement (``rollarc bench rose``).

The other pools' capacity is a load hint only: a full dedicated replica still takes the turn (its engine queues
it) and the policy's work stealing applies. Withdrawal and loss are the Router's: it stops routing to the
replica (:meth:`stop_accepting`, :meth:`mark_dead`), and the turns it held come back through the agent loops and
are routed again like any other turn.
"""

from __future__ import annotations

from rollarc.policy.routing import LeastLoaded, NoReplicaError, ReplicaState, Route, RoutingPolicy

BORROWED_POOL = "borrowed"  # the pool co-serving replicas are lent into (rollarc.runtime.harvest_pool)


class Dispatcher:
    def __init__(
        self,
        task_pools: dict[str, str | None],
        steal_fraction: float = 0.5,
        max_sticky: int = 100_000,
        *,
        dedicated_first: bool = False,
        borrowed_pool: str = BORROWED_POOL,
        hard_pools: frozenset[str] = frozenset(),
    ):
        self.task_pools = dict(task_pools)
        self.policy = RoutingPolicy(steal_fraction=steal_fraction, max_sticky=max_sticky)
        self.dedicated_first = dedicated_first
        self.borrowed_pool = borrowed_pool
        self.hard_pools = hard_pools
        self._hard_members = 0  # replicas of hard pools: none, and routing takes the indexed fast path
        self.replicas: dict[str, ReplicaState] = {}
        # the replicas by load, per pool, and all of them under None once a turn without a pool asks for them:
        # indexes of ``replicas`` for the policy
        self.loads: dict[str | None, LeastLoaded] = {}

    # ---- membership ----------------------------------------------------------------------------------
    def add_replica(self, name: str, pool: str, capacity: int) -> None:
        self.remove(name)
        state = ReplicaState(name=name, pool=pool, capacity=max(0, capacity))
        self.replicas[name] = state
        self._hard_members += pool in self.hard_pools
        for index in self._indexes(pool):
            index.members.append(state)
            index.rebuild()

    def set_capacity(self, name: str, capacity: int) -> None:
        """``name`` reported its headroom: it may hold ``capacity`` turns at once from now on (unknown: ignored)."""
        state = self.replicas.get(name)
        if state is not None:
            state.capacity = max(0, capacity)

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
            self._hard_members -= state.pool in self.hard_pools
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
        """Choose the replica for one turn and count it as outstanding there until :meth:`finish_turn`.

        Raises :class:`NoReplicaError` when no replica is usable, or when every usable one is hard-limited (see
        ``hard_pools``) and full.
        """
        if not self.dedicated_first and not self._hard_members:
            preferred = self.preferred_pool(task)
            if preferred is None and None not in self.loads:
                self.loads[None] = LeastLoaded(list(self.replicas.values()))
                self.loads[None].rebuild()
            route = self.policy.choose(self.replicas, cache_key, preferred, self.loads)
        else:
            route = self._choose_with_room(cache_key, task)
        state = self.replicas[route.replica]
        state.outstanding += 1
        state.foreign += int(route.stolen)
        self._load_changed(state)
        return route

    def _choose_with_room(self, cache_key: str | None, task: str | None) -> Route:
        """The policy's choice among the usable replicas with a free place (or not hard-limited),
        dedicated ones first when ``dedicated_first`` and the trajectory's cached prefix is not on one of them."""
        candidates = {
            name: r
            for name, r in self.replicas.items()
            if r.usable and (r.outstanding < r.capacity or not self._hard(r))
        }
        if not candidates:
            if any(r.usable for r in self.replicas.values()):
                raise NoReplicaError("every rollout replica is at its capacity")
            raise NoReplicaError("no rollout replica is alive and accepting requests")
        if self.dedicated_first:
            home = self.policy.sticky.get(cache_key) if cache_key is not None else None
            dedicated = {
                n: r for n, r in candidates.items() if r.pool != self.borrowed_pool and r.outstanding < r.capacity
            }
            if dedicated and home not in candidates:
                candidates = dedicated
        return self.policy.choose(candidates, cache_key, self.preferred_pool(task))

    def finish_turn(self, route: Route) -> None:
        state = self.replicas.get(route.replica)
        if state is not None:
            state.outstanding -= 1
            state.foreign -= int(route.stolen)
            self._load_changed(state)

    def _hard(self, replica: ReplicaState) -> bool:
        """Whether ``replica``'s capacity is a limit (not only a load hint for the policy's stealing rule)."""
        return replica.pool in self.hard_pools

    # ---- indexes -------------------------------------------------------------------------------------
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
