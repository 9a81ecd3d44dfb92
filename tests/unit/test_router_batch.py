"""``Router.generate_batch``: many turns in one call, one call per replica onward, each completion streamed back as
soon as it is done, and failover of a replica that dies mid-batch.

The real Router class runs in-process with fake replicas, so the calls each replica receives are counted
without Ray. A fake's ``generate_batch`` mimics a Ray streaming generator: an async iterator of awaitables.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray.exceptions import RayActorError

from rollarc.engine.types import Completion, SamplingParams
from rollarc.runtime.router import Router

PARAMS = SamplingParams(temperature=0.0, max_tokens=2)


class Remote:
    def __init__(self, fn: Any):
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


async def ready(value: Any) -> Any:
    return value


def reply(prompt_ids: list[int], key: Any) -> Completion:
    """The turn's prompt length as its one token, so each completion names its turn."""
    return Completion(str(key), len(prompt_ids), [len(prompt_ids)], [-0.5], [0], 0, "length")


class BatchReplica:
    """Counts single and batched calls; ``dead`` raises; turns whose prompt length is in ``held`` wait for ``gate``."""

    def __init__(self, dead: bool = False, held: tuple[int, ...] = ()):
        self.dead = dead
        self.held = held
        self.gate = asyncio.Event()
        self.batches: list[int] = []
        self.singles = 0
        self.generate = Remote(self._generate)
        self.generate_batch = Remote(self._generate_batch)

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, key: str | None, *_: Any) -> Completion:
        if self.dead:
            raise RayActorError()
        self.singles += 1
        return reply(prompt_ids, key)

    async def _generate_batch(self, turns: list[tuple]):
        if self.dead:
            raise RayActorError()
        self.batches.append(len(turns))
        later = [(j, t) for j, t in enumerate(turns) if len(t[0]) in self.held]
        for j, turn in enumerate(turns):
            if len(turn[0]) not in self.held:
                yield ready((j, reply(turn[0], turn[2])))
        if later:
            await self.gate.wait()
        for j, turn in later:
            yield ready((j, reply(turn[0], turn[2])))


def turns(n: int) -> list[tuple]:
    return [([1] * (i + 1), PARAMS, f"traj-{i}", "t", 0) for i in range(n)]


def run_batch(replicas: dict[str, BatchReplica], n: int) -> tuple[dict[int, Completion], dict[str, Any]]:
    async def go():
        router = Router.__ray_actor_class__({"t": None})
        for name, replica in replicas.items():
            router.add_replica(name, replica, "compute", 64)
        out = {i: c async for i, c in router.generate_batch(turns(n))}
        return out, router.routing_stats()

    return asyncio.run(go())


def test_a_batch_is_one_call_per_replica_and_every_turn_gets_its_completion():
    replicas = {"a": BatchReplica(), "b": BatchReplica()}
    completions, stats = run_batch(replicas, 6)
    assert {i: c.token_ids for i, c in completions.items()} == {i: [i + 1] for i in range(6)}
    assert {i: c.request_id for i, c in completions.items()} == {i: f"traj-{i}" for i in range(6)}
    assert sorted(len(r.batches) for r in replicas.values()) == [1, 1]  # both replicas used, one call each
    assert sum(sum(r.batches) for r in replicas.values()) == 6 and all(r.singles == 0 for r in replicas.values())
    assert stats["turns"] == {"t@compute": 6} and stats["tokens"] == {"t@compute": 6}
    assert stats["prompt_tokens"] == {"t@compute": 21}


def test_a_finished_turn_streams_back_while_a_slower_one_of_its_batch_still_runs():
    async def go():
        router = Router.__ray_actor_class__({"t": None})
        replica = BatchReplica(held=(1,))  # turn 0 (prompt length 1) waits for the gate
        router.add_replica("a", replica, "compute", 64)
        stream = router.generate_batch(turns(3))
        first = [await anext(stream), await anext(stream)]  # turns 1 and 2, before turn 0 is released
        replica.gate.set()
        last = [item async for item in stream]
        return [i for i, _ in first], [i for i, _ in last]

    assert asyncio.run(go()) == ([1, 2], [0])


def test_turns_of_a_replica_that_dies_mid_batch_fail_over_one_by_one():
    replicas = {"a": BatchReplica(dead=True), "b": BatchReplica()}
    completions, stats = run_batch(replicas, 4)
    assert {i: c.token_ids for i, c in completions.items()} == {0: [1], 1: [2], 2: [3], 3: [4]}
    assert stats["dead_replicas"] == ["a"]
    b = replicas["b"]
    assert b.singles + sum(b.batches) == 4 and b.singles >= 1  # a's turns re-ran on b through generate
    assert stats["turns"] == {"t@compute": 4}
