"""Router: the one front door of the rollout replicas (a Ray async actor).

It routes every turn through a :class:`~rollarc.policy.dispatcher.Dispatcher` (the pure routing core the
simulator runs too, built by :func:`~rollarc.runtime.scheduling.make_dispatcher`) and owns the control protocol that elasticity builds
on: ``suspend`` / ``resume`` (hold new turns), ``abort_all``, ``drain`` (wait for in-flight turns),
``add_replica`` / ``remove_replica`` at run time. A replica that dies mid-request (its actor, or its engine loop:
:class:`EngineDeadError`) is marked dead and the turn is retried on another; with none usable a turn waits up to ``replacement_wait_s`` for the
replacement the controller starts, then fails with a clear error.

The router itself is restarted by Ray when it dies (``max_restarts``), under the same handle. Single turns in
flight through it are retried there by Ray (``max_task_retries``); a batch's stream is not (its chunks depend on
timing, so Ray's replay could skip turns): the EnvWorker sends its unanswered turns again
(:mod:`rollarc.runtime.turn_resend`). A restarted router knows no replica, so it starts suspended: turns wait
until the controller has registered the replicas again (``reregister``).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import ray
from ray.exceptions import RayActorError

from rollarc.engine.types import Completion, EngineDeadError, SamplingParams
from rollarc.policy.routing import NoReplicaError, Route
from rollarc.rayproc.deadline import Kind
from rollarc.runtime.scheduling import make_dispatcher
from rollarc.runtime.turn_chunks import TurnChunk

# The deadline of a call that hands the router a replica's handle (add_replica, reregister). The first time the
# router sees a replica class, Ray loads that class to deserialise the handle: the replica's module, torch and
# transformers, seconds of CPU on two cores. Such a call waits as long as starting an actor may, not the short
# call deadline (the router itself imports neither, so that it answers its first call at once).
REGISTERING: Kind = "start"
MAX_FAILOVERS = 8
# A replica is lost when its actor died, or when its engine loop did and the actor lives on around it: an awaited
# call then raises Ray's RayTaskError typed as the cause too (``RayTaskError(EngineDeadError)``), caught here.
REPLICA_LOST = (RayActorError, EngineDeadError)

# One turn's arguments, as ``generate`` takes them: (prompt_ids, params, cache_key, task, step).
TurnArgs = tuple[list[int], SamplingParams, str | None, str | None, int | None]


@ray.remote
class Router:
    def __init__(self, task_pools: dict[str, str | None], steal_fraction: float = 0.5, dedicated_first: bool = False):
        self.dispatch = make_dispatcher(task_pools, steal_fraction, dedicated_first)
        self.replicas = self.dispatch.replicas
        self.handles: dict[str, Any] = {}
        self._open = asyncio.Event()
        context = ray.get_runtime_context()
        self.restarted = False  # built in the driver (a unit test): never restarted
        if context.get_actor_id() is not None:
            with warnings.catch_warnings():  # Ray's property reads its own deprecated ``actor_id``
                warnings.simplefilter("ignore")
                self.restarted = bool(context.was_current_actor_reconstructed)
        if not self.restarted:
            self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._inflight = 0
        self.held = 0  # turns waiting at the closed door (suspended, or restarted and not yet re-registered)
        self.dead: list[str] = []
        self.failovers = 0
        self.tokens: Counter[tuple[str, str]] = Counter()  # (task, pool) -> generated tokens
        self.prompt_tokens: Counter[tuple[str, str]] = Counter()
        self.turns: Counter[tuple[str, str]] = Counter()
        self.stolen = 0
        self.replica_turns: Counter[str] = Counter()
        self.replacement_wait_s = 0.0
        self.removed: list[str] = []

    # ---- membership --------------------------------------------------------------------------------
    def add_replica(self, name: str, handle: Any, pool: str, capacity: int) -> None:
        self.handles[name] = handle
        self.dispatch.add_replica(name, pool, capacity)

    def set_capacity(self, name: str, capacity: int) -> None:
        """``name`` reported its headroom (a lent co-serving replica: the turns its SLO guard admits now)."""
        self.dispatch.set_capacity(name, capacity)

    def set_replacement_wait(self, seconds: float) -> None:
        """A supervisor replaces dead replicas: with none usable, a turn waits this long for one before failing."""
        self.replacement_wait_s = seconds

    def reregister(self, replicas: list[tuple[str, Any, str, int]], replacement_wait_s: float = 0.0) -> None:
        """After a restart: learn the live replicas ``(name, handle, pool, capacity)`` again and open the door."""
        self.replacement_wait_s = replacement_wait_s
        for name, handle, pool, capacity in replicas:
            self.add_replica(name, handle, pool, capacity)
        self.restarted = False
        self._open.set()

    def needs_replicas(self) -> bool:
        """True after a restart, until :meth:`reregister`."""
        return self.restarted

    def mark_dead(self, name: str) -> None:
        """The controller found ``name`` dead (a failed ping or sync): stop routing to it."""
        self._mark_dead(name)

    async def remove_replica(self, name: str, drain_timeout_s: float | None = None) -> dict[str, int]:
        """Take ``name`` out of service: suspend it, drain it, abort what is left, then forget it.

        New turns (and the next turns of its trajectories) go to the other replicas at once. Its in-flight
        turns may finish for ``drain_timeout_s`` seconds (None: as long as they take); those still running
        then are aborted, and the agent loops resume them (from their partial output) on the remaining replicas.
        Returns the counts: ``drained`` turns finished on it, ``aborted`` turns cut short.
        """
        state = self.dispatch.stop_accepting(name)
        if state is None:
            return {"drained": 0, "aborted": 0}
        in_flight = state.outstanding
        loop = asyncio.get_running_loop()
        deadline = None if drain_timeout_s is None else loop.time() + drain_timeout_s
        while state.alive and state.outstanding > 0 and (deadline is None or loop.time() < deadline):
            await asyncio.sleep(0.005)
        left = state.outstanding if state.alive else 0
        aborted = 0
        if left:
            try:
                aborted = await self.handles[name].abort_all.remote()
            except REPLICA_LOST:
                self._mark_dead(name)
            while state.alive and state.outstanding > 0:  # aborted turns return at the next decode step
                await asyncio.sleep(0.005)
        self.dispatch.remove(name)
        self.handles.pop(name, None)
        self.removed.append(name)
        return {"drained": max(0, in_flight - left), "aborted": aborted}

    # ---- control protocol --------------------------------------------------------------------------
    async def _wait_open(self, turns: int) -> None:
        self.held += turns
        try:
            await self._open.wait()
        finally:
            self.held -= turns

    def suspend(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def abort_all(self) -> int:
        counts = await asyncio.gather(
            *[h.abort_all.remote() for n, h in self.handles.items() if self.replicas[n].alive], return_exceptions=True
        )
        return sum(c for c in counts if isinstance(c, int))

    async def drain(self) -> None:
        await self._idle.wait()

    # ---- the data path -----------------------------------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cache_key: str | None = None,
        task: str | None = None,
        step: int | None = None,
    ) -> Completion:
        await self._wait_open(1)
        self._inflight += 1
        self._idle.clear()
        try:
            for _ in range(MAX_FAILOVERS):
                route = await self._choose(cache_key, task)
                pool = self.replicas[route.replica].pool
                try:
                    completion = await self.handles[route.replica].generate.remote(
                        prompt_ids, params, cache_key, task, step
                    )
                except REPLICA_LOST:
                    self._mark_dead(route.replica)
                    continue
                finally:
                    self.dispatch.finish_turn(route)
                self._count(route, pool, task, completion)
                return completion
            raise NoReplicaError(f"turn failed over {MAX_FAILOVERS} times; dead replicas: {self.dead}")
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    @ray.method(max_task_retries=0)  # not replayed by Ray: the caller resends what is unanswered (turn_resend)
    async def generate_batch(self, turns: list[TurnArgs]) -> AsyncIterator[TurnChunk]:
        """Many turns in one call: one Ray call from the EnvWorker, one per replica onward.

        Short single-turn work pays two Ray hops per turn on the per-turn path, more than the turn's own
        compute (docs/performance.md). A Ray streaming generator: each item holds ``(index in turns,
        completion)`` of every turn finished since the previous item (the replicas' chunks that arrived
        meanwhile, merged; ``turn_chunks``), so no turn waits for the slowest of its batch. Each turn is routed exactly as
        ``generate`` routes it; the turns bound for one replica travel together. A replica that dies
        mid-batch is marked dead and its unfinished turns fall back to ``generate``, which fails them over
        one by one.
        """
        await self._wait_open(len(turns))
        self._inflight += len(turns)
        self._idle.clear()
        tasks: list[asyncio.Task] = []
        try:
            routes: list[Route] = []
            try:
                for turn in turns:
                    routes.append(await self._choose(turn[2], turn[3]))
            except NoReplicaError:
                for route in routes:
                    self.dispatch.finish_turn(route)
                raise
            by_replica: dict[str, list[int]] = {}
            for index, route in enumerate(routes):
                by_replica.setdefault(route.replica, []).append(index)
            results: asyncio.Queue[TurnChunk | Exception] = asyncio.Queue()

            async def run(replica: str, indices: list[int]) -> None:
                pool = self.replicas[replica].pool
                left = set(indices)
                try:
                    stream = self.handles[replica].generate_batch.remote([turns[i] for i in indices])
                    async for ref in stream:
                        chunk: TurnChunk = []
                        for j, completion in await ref:
                            i = indices[j]
                            left.discard(i)
                            self.dispatch.finish_turn(routes[i])
                            self._count(routes[i], pool, turns[i][3], completion)
                            chunk.append((i, completion))
                        results.put_nowait(chunk)
                except REPLICA_LOST:
                    self._mark_dead(replica)
                except Exception as err:  # noqa: BLE001 - not swallowed: generate_batch raises it to the caller
                    results.put_nowait(err)
                finally:
                    for i in left:
                        self.dispatch.finish_turn(routes[i])
                if left:  # the replica died: its unfinished turns fail over one by one
                    lost = sorted(left)
                    try:
                        completions = await asyncio.gather(*[self.generate(*turns[i]) for i in lost])
                    except Exception as err:  # noqa: BLE001 - not swallowed: generate_batch raises it to the caller
                        results.put_nowait(err)
                        return
                    results.put_nowait(list(zip(lost, completions, strict=True)))

            tasks = [asyncio.ensure_future(run(replica, indices)) for replica, indices in by_replica.items()]
            unfinished = len(turns)
            while unfinished:
                items = [await results.get()]
                while not results.empty():  # chunks of several replicas that arrived meanwhile travel together
                    items.append(results.get_nowait())
                merged: TurnChunk = []
                for item in items:
                    if isinstance(item, Exception):
                        raise item
                    merged += item
                unfinished -= len(merged)
                if merged:
                    yield merged
        finally:
            for task in tasks:
                task.cancel()
            self._inflight -= len(turns)
            if self._inflight == 0:
                self._idle.set()

    def _count(self, route: Route, pool: str, task: str | None, completion: Completion) -> None:
        key = (task or "-", pool)
        self.tokens[key] += completion.num_tokens
        self.prompt_tokens[key] += completion.prompt_len
        self.turns[key] += 1
        self.replica_turns[route.replica] += 1
        self.stolen += int(route.stolen and not route.sticky)

    async def _choose(self, cache_key: str | None, task: str | None) -> Route:
        """Start a turn on a replica; with none usable, wait up to ``replacement_wait_s`` for a replacement."""
        deadline = time.monotonic() + self.replacement_wait_s
        while True:
            try:
                return self.dispatch.start_turn(cache_key, task)
            except NoReplicaError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.05)  # the last replica died; its replacement is being started

    def release(self, cache_key: str) -> None:
        self.dispatch.release(cache_key)

    def release_many(self, cache_keys: list[str]) -> None:
        """:meth:`release` for several trajectories in one call (the EnvWorker batches them)."""
        for cache_key in cache_keys:
            self.dispatch.release(cache_key)

    async def abort_key(self, cache_key: str) -> None:
        """Abort the in-flight turn of a cancelled trajectory on the replica that serves it."""
        name = self.dispatch.sticky_replica(cache_key)
        self.dispatch.release(cache_key)
        state = self.replicas.get(name) if name is not None else None
        if name is not None and state is not None and state.alive:
            await self.handles[name].abort_key.remote(cache_key)

    def _mark_dead(self, name: str) -> None:
        if self.dispatch.mark_dead(name):
            self.dead.append(name)
            self.failovers += 1

    # ---- introspection -----------------------------------------------------------------------------
    def alive(self) -> list[str]:
        return [n for n, s in self.replicas.items() if s.alive]

    def routing_stats(self) -> dict[str, Any]:
        return {
            "tokens": {f"{t}@{p}": n for (t, p), n in self.tokens.items()},
            "prompt_tokens": {f"{t}@{p}": n for (t, p), n in self.prompt_tokens.items()},
            "turns": {f"{t}@{p}": n for (t, p), n in self.turns.items()},
            "stolen_turns": self.stolen,
            "replica_turns": dict(self.replica_turns),
            "dead_replicas": list(self.dead),
            "removed_replicas": list(self.removed),
            "failovers": self.failovers,
            "held_turns": self.held,
            "time": time.time(),
        }

    def handle_of(self, name: str) -> Any:
        return self.handles[name]
