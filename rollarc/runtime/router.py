"""Router: the one front door of the rollout replicas (a Ray async actor).

It applies :class:`RoutingPolicy` to every turn and owns the control protocol that elasticity builds
on: ``suspend`` / ``resume`` (hold new turns), ``abort_all``, ``drain`` (wait for in-flight turns),
``add_replica`` / ``remove_replica`` at run time. A replica that dies mid-request is marked dead and
the turn is retried on another; when none is left the turn fails with a clear error.

The router itself is restarted by Ray when it dies (``max_restarts``), under the same handle, and the turns
in flight through it are retried there (``max_task_retries``). A restarted router knows no replica, so it
starts suspended: turns wait until the controller has registered the replicas again (``reregister``).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections import Counter
from typing import Any

import ray
from ray.exceptions import RayActorError

from rollarc.engine.types import Completion, SamplingParams
from rollarc.runtime.routing import NoReplicaError, ReplicaState, Route, RoutingPolicy

MAX_FAILOVERS = 8


@ray.remote
class Router:
    def __init__(self, task_pools: dict[str, str | None], steal_fraction: float = 0.5):
        self.task_pools = task_pools
        self.policy = RoutingPolicy(steal_fraction=steal_fraction)
        self.handles: dict[str, Any] = {}
        self.replicas: dict[str, ReplicaState] = {}
        self._open = asyncio.Event()
        with warnings.catch_warnings():  # Ray's property reads its own deprecated ``actor_id``
            warnings.simplefilter("ignore")
            self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        if not self.restarted:
            self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._inflight = 0
        self.dead: list[str] = []
        self.failovers = 0
        self.tokens: Counter[tuple[str, str]] = Counter()  # (task, pool) -> generated tokens
        self.prompt_tokens: Counter[tuple[str, str]] = Counter()
        self.turns: Counter[tuple[str, str]] = Counter()
        self.stolen = 0
        self.replica_turns: Counter[str] = Counter()
        self.replacement_wait_s = 0.0

    # ---- membership --------------------------------------------------------------------------------
    def add_replica(self, name: str, handle: Any, pool: str, capacity: int) -> None:
        self.handles[name] = handle
        self.replicas[name] = ReplicaState(name=name, pool=pool, capacity=capacity)

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

    async def remove_replica(self, name: str, drain: bool = True) -> None:
        """Stop routing to ``name``; with ``drain`` wait until its in-flight turns have finished."""
        state = self.replicas.get(name)
        if state is None:
            return
        state.accepting = False
        self.policy.forget(name)
        while drain and state.alive and state.outstanding > 0:
            await asyncio.sleep(0.005)
        self.replicas.pop(name, None)
        self.handles.pop(name, None)

    # ---- control protocol --------------------------------------------------------------------------
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
        await self._open.wait()
        preferred = self.task_pools.get(task) if task is not None else None
        self._inflight += 1
        self._idle.clear()
        try:
            for _ in range(MAX_FAILOVERS):
                route = await self._choose(cache_key, preferred)
                state = self.replicas[route.replica]
                state.outstanding += 1
                state.foreign += int(route.stolen)
                try:
                    completion = await self.handles[route.replica].generate.remote(
                        prompt_ids, params, cache_key, task, step
                    )
                except RayActorError:
                    self._mark_dead(route.replica)
                    continue
                finally:
                    state.outstanding -= 1
                    state.foreign -= int(route.stolen)
                key = (task or "-", state.pool)
                self.tokens[key] += completion.num_tokens
                self.prompt_tokens[key] += completion.prompt_len
                self.turns[key] += 1
                self.replica_turns[route.replica] += 1
                self.stolen += int(route.stolen and not route.sticky)
                return completion
            raise NoReplicaError(f"turn failed over {MAX_FAILOVERS} times; dead replicas: {self.dead}")
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _choose(self, cache_key: str | None, preferred: str | None) -> Route:
        deadline = time.monotonic() + self.replacement_wait_s
        while True:
            try:
                return self.policy.choose(self.replicas, cache_key, preferred)
            except NoReplicaError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.05)  # the last replica died; its replacement is being started

    def release(self, cache_key: str) -> None:
        self.policy.release(cache_key)

    async def abort_key(self, cache_key: str) -> None:
        """Abort the in-flight turn of a cancelled trajectory on the replica that serves it."""
        name = self.policy.sticky.get(cache_key)
        self.policy.release(cache_key)
        state = self.replicas.get(name) if name is not None else None
        if name is not None and state is not None and state.alive:
            await self.handles[name].abort_key.remote(cache_key)

    def _mark_dead(self, name: str) -> None:
        state = self.replicas.get(name)
        if state is not None and state.alive:
            state.alive = False
            self.dead.append(name)
            self.failovers += 1
            self.policy.forget(name)

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
            "failovers": self.failovers,
            "time": time.time(),
        }

    def handle_of(self, name: str) -> Any:
        return self.handles[name]
