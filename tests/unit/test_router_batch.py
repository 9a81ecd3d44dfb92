"""``Router.generate_batch``: many turns in one call, one call per replica onward, failover of a dead replica.

The real Router class runs in-process with fake replicas, so the calls each replica receives are counted
without Ray.
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


class BatchReplica:
    """Echoes each turn's prompt length as its one token; counts single and batched calls; ``dead`` raises."""

    def __init__(self, dead: bool = False):
        self.dead = dead
        self.batches: list[int] = []
        self.singles = 0
        self.generate = Remote(self._generate)
        self.generate_batch = Remote(self._generate_batch)

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, key: str | None, *_: Any) -> Completion:
        if self.dead:
            raise RayActorError()
        self.singles += 1
        return Completion(str(key), len(prompt_ids), [len(prompt_ids)], [-0.5], [0], 0, "length")

    async def _generate_batch(self, turns: list[tuple]) -> list[Completion]:
        if self.dead:
            raise RayActorError()
        self.batches.append(len(turns))
        return [Completion(str(t[2]), len(t[0]), [len(t[0])], [-0.5], [0], 0, "length") for t in turns]


def run_batch(replicas: dict[str, BatchReplica], n: int) -> tuple[list[Completion], dict[str, Any]]:
    async def go():
        router = Router.__ray_actor_class__({"t": None})
        for name, replica in replicas.items():
            router.add_replica(name, replica, "compute", 64)
        turns = [([1] * (i + 1), PARAMS, f"traj-{i}", "t", 0) for i in range(n)]
        completions = await router.generate_batch(turns)
        return completions, router.routing_stats()

    return asyncio.run(go())


def test_a_batch_is_one_call_per_replica_and_completions_come_back_in_order():
    replicas = {"a": BatchReplica(), "b": BatchReplica()}
    completions, stats = run_batch(replicas, 6)
    assert [c.token_ids for c in completions] == [[i + 1] for i in range(6)]
    assert [c.request_id for c in completions] == [f"traj-{i}" for i in range(6)]
    assert sorted(len(r.batches) for r in replicas.values()) == [1, 1]  # both replicas used, one call each
    assert sum(sum(r.batches) for r in replicas.values()) == 6 and all(r.singles == 0 for r in replicas.values())
    assert stats["turns"] == {"t@compute": 6} and stats["tokens"] == {"t@compute": 6}
    assert stats["prompt_tokens"] == {"t@compute": 21}


def test_turns_of_a_replica_that_dies_mid_batch_fail_over_one_by_one():
    replicas = {"a": BatchReplica(dead=True), "b": BatchReplica()}
    completions, stats = run_batch(replicas, 4)
    assert [c.token_ids for c in completions] == [[1], [2], [3], [4]]
    assert stats["dead_replicas"] == ["a"]
    b = replicas["b"]
    assert b.singles + sum(b.batches) == 4 and b.singles >= 1  # a's turns re-ran on b through generate
    assert stats["turns"] == {"t@compute": 4}
