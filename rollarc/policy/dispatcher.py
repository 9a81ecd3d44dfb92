"""The rollout replicas' membership, load and capacity, and the routing policy applied to every turn.

The Ray ``Router`` actor, the simulator and the ROSE benchmark's driver all route through a
:class:`Dispatcher`: a turn starts with :meth:`Dispatcher.start_turn` (the policy chooses a replica and its
load goes up) and ends with :meth:`Dispatcher.finish_turn`. Keeping the load counters here, next to the
policy that reads them, is what lets every driver make the same routing decisions.

Borrowed capacity (ROSE, docs/rose.md) adds three things, all here so that there is one routing decision:

- **capacity from headroom**: :meth:`set_capacity` updates a replica's capacity from the headroom it reports
  (a co-serving replica admits only as many rollout turns as its SLO guard allows);
- **a hard limit for borrowed replicas** (``hard_pools``): a replica of such a pool takes a turn only while
  ``outstanding < capacity``; the others take the rest. The Router keeps ``borrowed`` hard, so a lent
  co-serving replica never holds more turns than its guard last admitted, and training runs need no queue;
- **a wait queue** (``enforce_capacity``, every pool hard): a turn is placed only on a replica with a free place
  (``outstanding < capacity``); when none has one it waits in :attr:`waiting` (first in, first out) until
  :meth:`dispatch` finds room. Without it (the default, as the dedicated replicas' engines queue by
  themselves) a full replica still takes the turn and the policy's work stealing applies;
- **dedicated first** (``dedicated_first``): a turn with no cached prefix to go back to prefers a replica
  outside ``borrowed_pool`` while one has room, so borrowed capacity only takes what dedicated capacity cannot.
  An option, not a rule: which order wins is a measurement (``rollarc bench rose``).

Withdrawal and loss: :meth:`migrate` hands a replica's placed turns back to the head of the wait queue (the
withdrawn replica gave them back, or it died); they are placed again by the next :meth:`dispatch`.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from rollarc.policy.routing import LeastLoaded, NoReplicaError, ReplicaState, Route, RoutingPolicy

BORROWED_POOL = "borrowed"  # the pool co-serving replicas are lent into (rollarc.runtime.harvest_pool)


@dataclass(frozen=True)
class QueuedTurn:
    """A turn waiting for a place: its id, its trajectory's cache key and its task."""

    turn: str
    cache_key: str | None
    task: str | None


class Dispatcher:
    def __init__(
        self,
        task_pools: dict[str, str | None],
        steal_fraction: float = 0.5,
        max_sticky: int = 100_000,
        *,
        enforce_capacity: bool = False,
        dedicated_first: bool = False,
        borrowed_pool: str = BORROWED_POOL,
        hard_pools: frozenset[str] = frozenset(),
    ):
        self.task_pools = dict(task_pools)
        self.policy = RoutingPolicy(steal_fraction=steal_fraction, max_sticky=max_sticky)
        self.enforce_capacity = enforce_capacity
        self.dedicated_first = dedicated_first
        self.borrowed_pool = borrowed_pool
        self.hard_pools = hard_pools
        self._hard_members = 0  # replicas of hard pools: none, and routing takes the indexed fast path
        self.replicas: dict[str, ReplicaState] = {}
        # the replicas by load, per pool, and all of them under None once a turn without a pool asks for them:
        # indexes of ``replicas`` for the policy
        self.loads: dict[str | None, LeastLoaded] = {}
        self.waiting: deque[QueuedTurn] = deque()
        self.placed: dict[str, tuple[QueuedTurn, Route]] = {}  # turn id -> (the turn, its route), queued turns only
        self.counters: Counter[str] = Counter(
            dispatched=0, dispatched_borrowed=0, affinity_hits=0, affinity_misses=0, migrations=0
        )

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

        When every usable replica is hard-limited and full this raises :class:`NoReplicaError`; the
        queued path (:meth:`submit`, :meth:`dispatch`) waits instead.
        """
        route = self.try_start_turn(cache_key, task)
        if route is None:
            raise NoReplicaError("every rollout replica is at its capacity")
        return route

    def try_start_turn(self, cache_key: str | None, task: str | None) -> Route | None:
        """:meth:`start_turn`, or None when every usable replica is hard-limited (see ``hard_pools``) and full."""
        had_home = cache_key is not None and cache_key in self.policy.sticky
        route: Route | None
        if not self.enforce_capacity and not self.dedicated_first and not self._hard_members:
            preferred = self.preferred_pool(task)
            if preferred is None and None not in self.loads:
                self.loads[None] = LeastLoaded(list(self.replicas.values()))
                self.loads[None].rebuild()
            route = self.policy.choose(self.replicas, cache_key, preferred, self.loads)
        else:
            route = self._choose_with_room(cache_key, task)
            if route is None:
                return None
        state = self.replicas[route.replica]
        state.outstanding += 1
        state.foreign += int(route.stolen)
        self._load_changed(state)
        self.counters["dispatched"] += 1
        self.counters["dispatched_borrowed"] += state.pool == self.borrowed_pool
        if had_home:
            self.counters["affinity_hits" if route.sticky else "affinity_misses"] += 1
        return route

    def _choose_with_room(self, cache_key: str | None, task: str | None) -> Route | None:
        """The policy's choice among the usable replicas with a free place (or not hard-limited),
        dedicated ones first when ``dedicated_first`` and the trajectory's cached prefix is not on one of them."""
        candidates = {
            name: r
            for name, r in self.replicas.items()
            if r.usable and (r.outstanding < r.capacity or not self._hard(r))
        }
        if not candidates:
            if any(r.usable for r in self.replicas.values()):
                return None
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

    # ---- the wait queue ------------------------------------------------------------------------------
    def submit(self, turn: str, cache_key: str | None, task: str | None = None) -> None:
        """Queue a turn; :meth:`dispatch` places it once a replica has room."""
        self.waiting.append(QueuedTurn(turn, cache_key, task))

    def dispatch(self) -> list[tuple[str, Route]]:
        """Place the queued turns, in order, on replicas with room; the others keep their place in the queue.

        A later turn may go before an earlier one that found no room (its trajectory's replica, say, has a
        free place), so no free place idles while the queue's head waits.
        """
        placed: list[tuple[str, Route]] = []
        still: deque[QueuedTurn] = deque()
        while self.waiting:
            queued = self.waiting.popleft()
            route = self.try_start_turn(queued.cache_key, queued.task) if self._any_room() else None
            if route is None:
                still.append(queued)
                continue
            self.placed[queued.turn] = (queued, route)
            placed.append((queued.turn, route))
        self.waiting = still
        return placed

    def complete(self, turn: str) -> Route:
        """A queued turn finished; returns the route it ran on (its trajectory sticks to that replica)."""
        _, route = self.placed.pop(turn)
        self.finish_turn(route)
        return route

    def migrate(self, name: str, turns: list[str] | None = None) -> list[str]:
        """``name`` handed ``turns`` back (all its placed turns when None: it was withdrawn or died): they go back
        to the head of the queue, in the order they were placed, and their trajectories forget ``name``."""
        moving = [t for t, (_, route) in self.placed.items() if route.replica == name] if turns is None else turns
        for turn in reversed(moving):
            queued, route = self.placed.pop(turn)
            self.finish_turn(route)
            if queued.cache_key is not None and self.policy.sticky.get(queued.cache_key) == name:
                self.policy.release(queued.cache_key)
            self.waiting.appendleft(queued)
        self.counters["migrations"] += len(moving)
        return moving

    def _hard(self, replica: ReplicaState) -> bool:
        """Whether ``replica``'s capacity is a limit (not only a load hint for the policy's stealing rule)."""
        return self.enforce_capacity or replica.pool in self.hard_pools

    def _any_room(self) -> bool:
        return any(r.usable and (r.outstanding < r.capacity or not self._hard(r)) for r in self.replicas.values())

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
