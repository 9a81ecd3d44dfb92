"""``Router.generate_batch``: many turns in one call, one call per replica onward, each completion streamed back as
soon as it is done (the turns done together in one chunk), and failover of a replica that dies mid-batch.

The real Router class runs in-process with fake replicas, so the calls each replica receives are counted
without Ray. A fake's ``generate_batch`` mimics a Ray streaming generator: an async iterator of awaitables,
each resolving to a chunk ``[(index, completion), ...]``.
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
        self.chunks: list[int] = []  # turns per streamed item
        self.generate = Remote(self._generate)
        self.generate_batch = Remote(self._generate_batch)

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, key: str | None, *_: Any) -> Completion:
        if self.dead:
            raise RayActorError()
        self.singles += 1
        return reply(prompt_ids, key)

    async def _generate_batch(self, turns: list[tuple]):
        """The turns not held in one chunk, then (once ``gate`` is set) the held ones in another."""
        if self.dead:
            raise RayActorError()
        self.batches.append(len(turns))
        now = [(j, reply(t[0], t[2])) for j, t in enumerate(turns) if len(t[0]) not in self.held]
        later = [(j, reply(t[0], t[2])) for j, t in enumerate(turns) if len(t[0]) in self.held]
        if now:
            self.chunks.append(len(now))
            yield ready(now)
        if later:
            await self.gate.wait()
            self.chunks.append(len(later))
            yield ready(later)


def turns(n: int) -> list[tuple]:
    return [([1] * (i + 1), PARAMS, f"traj-{i}", "t", 0) for i in range(n)]


def run_batch(replicas: dict[str, BatchReplica], n: int) -> tuple[dict[int, Completion], dict[str, Any]]:
    async def go():
        router = Router.__ray_actor_class__({"t": None})
        for name, replica in replicas.items():
            router.add_replica(name, replica, "compute", 64)
        out = {i: c async for chunk in router.generate_batch(turns(n)) for i, c in chunk}
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
        first = await anext(stream)  # turns 1 and 2, done together, before turn 0 is released
        replica.gate.set()
        last = [item async for item in stream]
        return [i for i, _ in first], [[i for i, _ in chunk] for chunk in last]

    assert asyncio.run(go()) == ([1, 2], [[0]])


def test_turns_done_together_travel_as_one_item_on_each_hop():
    """64 turns that end at once: one streamed item from the replica and one from the router, not 64 each."""

    async def go():
        router = Router.__ray_actor_class__({"t": None})
        replica = BatchReplica()
        router.add_replica("a", replica, "compute", 64)
        return [chunk async for chunk in router.generate_batch(turns(64))], replica.chunks

    chunks, replica_chunks = asyncio.run(go())
    assert replica_chunks == [64]
    assert [[i for i, _ in chunk] for chunk in chunks] == [list(range(64))]
    assert [c.token_ids for _, c in chunks[0]] == [[i + 1] for i in range(64)]


def test_chunks_of_two_replicas_that_arrive_meanwhile_are_merged():
    async def go():
        router = Router.__ray_actor_class__({"t": None})
        a, b = BatchReplica(), BatchReplica()
        router.add_replica("a", a, "compute", 64)
        router.add_replica("b", b, "compute", 64)
        chunks = [chunk async for chunk in router.generate_batch(turns(8))]
        return chunks, a.chunks, b.chunks

    chunks, a_chunks, b_chunks = asyncio.run(go())
    assert sorted(a_chunks + b_chunks) == [4, 4]  # least loaded: the turns alternate between a and b
    assert len(chunks) == 1 and sorted(i for i, _ in chunks[0]) == list(range(8))


def test_turns_of_a_replica_that_dies_mid_batch_fail_over_one_by_one():
    replicas = {"a": BatchReplica(dead=True), "b": BatchReplica()}
    completions, stats = run_batch(replicas, 4)
    assert {i: c.token_ids for i, c in completions.items()} == {0: [1], 1: [2], 2: [3], 3: [4]}
    assert stats["dead_replicas"] == ["a"]
    b = replicas["b"]
    assert b.singles + sum(b.batches) == 4 and b.singles >= 1  # a's turns re-ran on b through generate
    assert stats["turns"] == {"t@compute": 4}
