"""A replica whose engine loop died is failed over like a dead actor, and a turn with no replica left fails its
trajectory (counted by kind), never the EnvWorker's group.

The Router and EnvWorker run in-process (``__ray_actor_class__``) with fake handles. A replica's engine death
reaches the router as Ray delivers it: a ``RayTaskError`` typed as its cause (``RayTaskError(EngineDeadError)``),
built here with Ray's own ``as_instanceof_cause``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ray.exceptions import RayTaskError

from rollarc.engine.async_engine import EngineDeadError
from rollarc.engine.config import EngineConfig
from rollarc.engine.types import Completion
from rollarc.policy.routing import NoReplicaError
from rollarc.runtime.env_worker import EnvWorker, GroupResult, GroupSpec
from rollarc.runtime.rollout_worker import RolloutWorker
from rollarc.runtime.router import Router
from rollarc.runtime.turn_resend import lost_turn
from rollarc.sync.config import SyncConfig
from tests.unit.test_agent_loop import SAMPLING, task
from tests.unit.test_router_batch import PARAMS, BatchReplica, Remote, turns


def remote_error(cause: Exception) -> RayTaskError:
    """``cause`` as a caller of the remote method that raised it sees it."""
    try:
        raise cause
    except type(cause) as raised:
        return RayTaskError("generate", "Traceback (most recent call last):\n  ...", raised).as_instanceof_cause()


class EngineDeadReplica(BatchReplica):
    """An actor that lives on around a dead engine: every call raises Ray's error typed as EngineDeadError."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.generate = Remote(self._dead_generate)
        self.generate_batch = Remote(self._dead_batch)

    async def _dead_generate(self, *_: Any) -> Completion:
        self.calls += 1
        raise remote_error(EngineDeadError("engine loop failed: TypeError('boom')"))

    async def _dead_batch(self, turns: list[tuple]):
        self.calls += 1
        raise remote_error(EngineDeadError("engine loop failed: TypeError('boom')"))
        yield  # an async generator, as a Ray streaming call is


def dead_and_live() -> tuple[Any, EngineDeadReplica, BatchReplica]:
    """A router (in-process) over replica "a", whose engine died, and "b", which serves."""
    router = Router.__ray_actor_class__({"t": None})
    dead, live = EngineDeadReplica(), BatchReplica()
    router.add_replica("a", dead, "compute", 64)
    router.add_replica("b", live, "compute", 64)
    return router, dead, live


def test_a_turn_on_a_replica_whose_engine_died_fails_over_and_the_replica_is_marked_dead():
    async def go():
        router, dead, live = dead_and_live()
        # sticky key routed to "a" first (least loaded, ties by name), then failed over to "b"
        completion = await router.generate([1, 1, 1], PARAMS, "traj-0", "t", 0)
        return completion, router.routing_stats(), dead.calls, live.singles

    completion, stats, dead_calls, live_calls = asyncio.run(go())
    assert completion.token_ids == [3] and completion.request_id == "traj-0"
    assert stats["dead_replicas"] == ["a"] and stats["failovers"] == 1
    assert (dead_calls, live_calls) == (1, 1)
    assert stats["replica_turns"] == {"b": 1}


def test_a_batch_on_a_replica_whose_engine_died_fails_over_turn_by_turn():
    async def go():
        router, _dead, _live = dead_and_live()
        out = {i: c async for chunk in router.generate_batch(turns(4)) for i, c in chunk}
        return out, router.routing_stats()

    completions, stats = asyncio.run(go())
    assert {i: c.token_ids for i, c in completions.items()} == {0: [1], 1: [2], 2: [3], 3: [4]}
    assert stats["dead_replicas"] == ["a"] and stats["replica_turns"] == {"b": 4}


def test_with_every_engine_dead_a_turn_ends_with_no_replica_error_not_the_engines_error():
    dead = EngineDeadReplica()

    async def go():
        router = Router.__ray_actor_class__({"t": None})
        router.add_replica("a", dead, "compute", 64)
        await router.generate([1], PARAMS, "traj-0", "t", 0)

    with pytest.raises(NoReplicaError) as err:
        asyncio.run(go())
    assert str(err.value) == "no rollout replica is alive and accepting requests"
    assert dead.calls == 1  # marked dead at its first failure: never retried


def test_ping_reports_an_engine_whose_loop_died(nano_policy_dir):
    """The replica's actor lives on around a dead engine loop: its ping says so, naming the loop's error."""

    async def go() -> tuple[str, Exception]:
        worker = RolloutWorker.__ray_actor_class__(
            "rollout-0", str(nano_policy_dir), EngineConfig(max_num_seqs=2), "finish", 1, "compute", 0, SyncConfig()
        )
        alive = await worker.ping()
        worker.engine.update_weights_nowait(42, 1)  # type: ignore[arg-type]  # not iterable: the loop dies of it
        worker.engine._thread.join(timeout=30)
        with pytest.raises(EngineDeadError) as dead:
            await worker.ping()
        return alive, dead.value

    alive, dead = asyncio.run(go())
    assert alive == "rollout-0"
    assert str(dead) == "engine loop failed: TypeError(\"'int' object is not iterable\")"


def test_lost_turn_names_the_cause_in_one_line_and_its_kind():
    failure = lost_turn(remote_error(NoReplicaError("no rollout replica is alive and accepting requests")))
    assert str(failure) == "NoReplicaError: no rollout replica is alive and accepting requests"
    assert failure.kind == "generation_error:NoReplicaError"


class NoReplicaRouter:
    """Answers every batch as the router does once its failovers are spent: Ray's error typed as NoReplicaError."""

    def __init__(self) -> None:
        self.generate_batch = Remote(self._generate_batch)
        self.release_many = Remote(lambda keys: None)
        self.abort_key = Remote(lambda key: None)

    async def _generate_batch(self, turns: list[tuple]):
        raise remote_error(NoReplicaError("no rollout replica is alive and accepting requests"))
        yield  # an async generator, as a Ray streaming call is


def test_no_replica_left_fails_each_trajectory_with_a_counted_kind_not_the_group(nano_policy_dir):
    cfg = task(turns=1)

    async def go() -> GroupResult:
        worker = EnvWorker.__ray_actor_class__(
            "env-0", {cfg.name: cfg}, str(nano_policy_dir), SAMPLING, NoReplicaRouter(), 1, 4, 60.0
        )
        try:
            return await worker.run_group(GroupSpec("g0", 0, cfg.name, 1, 2, 0, None, 0))
        finally:
            worker.runner.close()

    result = asyncio.run(go())
    assert result.trajectories == [] and len(result.failed) == 2
    assert {t.failure_kind for t in result.failed} == {"generation_error:NoReplicaError"}
    assert {t.failure_reason for t in result.failed} == {
        "turn 0: NoReplicaError: no rollout replica is alive and accepting requests"
    }
