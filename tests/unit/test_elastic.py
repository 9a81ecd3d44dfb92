"""Elastic rollout membership: the schedule's load-time checks, and a replica's removal (drain, then abort).

The removal runs the real Router class in-process, with fake replicas and the real episode runner, so the
counted outcomes (turns drained, turns aborted, trajectories finished) need no Ray.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.config import Config, rollout_entry_replicas, rollout_replicas_at
from rollarc.config.io import ConfigError, validate
from rollarc.engine.types import Completion, SamplingParams
from rollarc.runtime.router import Router
from tests.unit.test_agent_loop import RENDERER, SAMPLING, task

BASE: dict[str, Any] = {
    "tasks": [{"name": "t", "env": {"id": "sokoban"}}],
    "train": {"steps": 10},
    "cluster": {
        "pools": {"compute": {"count": 3}, "fast": {"count": 1}, "cpu": {"count": 2}},
        "roles": {
            "train": {"pool": "compute"},
            "rollout": [{"pool": "compute"}, {"pool": "fast"}],
            "env": {"pool": "cpu"},
        },
    },
}


def config(elastic: list[dict[str, Any]], **train: Any) -> Config:
    return validate(Config, {**BASE, "train": {**BASE["train"], **train}, "elastic": elastic})


def test_schedule_gives_the_replicas_per_pool_at_each_version():
    cfg = config([{"at_step": 2, "add": 1}, {"at_step": 5, "pool": "fast", "remove": 1}])
    counts = [rollout_replicas_at(cfg.elastic, cfg.cluster, v) for v in (0, 1, 2, 5, 9)]
    start, added, removed = {"compute": 1, "fast": 1}, {"compute": 2, "fast": 1}, {"compute": 2, "fast": 0}
    assert counts == [start, start, added, removed, removed]


@pytest.mark.parametrize(
    "elastic, message",
    [
        ([{"at_step": 1, "remove": 1}, {"at_step": 2, "pool": "fast", "remove": 1}], "no rollout replica"),
        ([{"at_step": 1, "pool": "fast", "remove": 2}], "removes more fast rollout replicas"),
        ([{"at_step": 10, "add": 1}], "at_step 10 is never reached"),
        ([{"at_step": 1, "pool": "cpu", "add": 1}], "pool 'cpu' has no cluster.roles.rollout entry"),
        ([{"at_step": 1, "pool": "fast", "add": 1}], "need 2 units of pool fast but cluster.pools.fast.count is 1"),
        ([{"at_step": 1, "add": 1, "remove": 1}], "exactly one of add or remove"),
        ([{"at_step": 1}], "exactly one of add or remove"),
    ],
)
def test_a_schedule_that_would_fail_mid_run_is_refused_at_load(elastic, message):
    with pytest.raises(ConfigError, match=message):
        config(elastic)


def test_removing_after_adding_keeps_one_replica_and_loads():
    cfg = config([{"at_step": 1, "pool": "fast", "remove": 1}, {"at_step": 3, "remove": 1}, {"at_step": 2, "add": 1}])
    assert rollout_replicas_at(cfg.elastic, cfg.cluster, 3) == {"compute": 1, "fast": 0}


def test_a_resumed_run_starts_each_rollout_entry_with_the_replicas_its_schedule_reached():
    data = {**BASE, "train": {"steps": 10}}
    data["cluster"] = {**BASE["cluster"], "pools": {"compute": {"count": 6}, "fast": {"count": 1}, "cpu": {"count": 2}}}
    data["cluster"]["roles"] = {
        **BASE["cluster"]["roles"],
        "rollout": [{"pool": "compute", "replicas": 2}, {"pool": "fast"}, {"pool": "compute"}],
    }
    data["elastic"] = [{"at_step": 2, "add": 2}, {"at_step": 4, "remove": 3}, {"at_step": 6, "add": 1}]
    cfg = validate(Config, data)
    per_version = [rollout_entry_replicas(cfg.elastic, cfg.cluster, v) for v in (0, 2, 4, 6)]
    # compute: 3 -> 5 -> 2 -> 3 replicas; the first compute entry takes the changes, the last one only when it runs dry
    assert per_version == [[2, 1, 1], [4, 1, 1], [1, 1, 1], [2, 1, 1]]
    data["elastic"] = [{"at_step": 2, "remove": 3}]
    assert rollout_entry_replicas(validate(Config, data).elastic, cfg.cluster, 2) == [0, 1, 0]


# ---- removal: drain, then abort ----------------------------------------------------------------------


class Remote:
    """``handle.method.remote(...)`` in-process: returns the coroutine, which the Router awaits."""

    def __init__(self, fn: Callable[..., Awaitable[Any]]):
        self.fn = fn

    def remote(self, *args: Any) -> Awaitable[Any]:
        return self.fn(*args)


class FakeReplica:
    """Replies "U" once ``opened`` is set; until then its turns wait (an abort ends them at once)."""

    def __init__(self, opened: bool):
        self.opened = asyncio.Event()
        if opened:
            self.opened.set()
        self.waiting: dict[int, asyncio.Event] = {}
        self.served = 0
        self.aborted = 0
        self.generate = Remote(self._generate)
        self.abort_all = Remote(self._abort_all)

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, key: str, *_: Any) -> Completion:
        abort = asyncio.Event()
        self.waiting[id(abort)] = abort
        try:
            opened = asyncio.ensure_future(self.opened.wait())
            aborted = asyncio.ensure_future(abort.wait())
            await asyncio.wait([opened, aborted], return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            aborted.cancel()
        finally:
            del self.waiting[id(abort)]
        if abort.is_set():
            self.aborted += 1
            return Completion(key, len(prompt_ids), [], [], [], 0, "abort")
        self.served += 1
        ids = RENDERER.encode_reply("U")
        return Completion(key, len(prompt_ids), ids, [-0.5] * len(ids), [0] * len(ids), 0, "stop")

    async def _abort_all(self) -> int:
        for event in self.waiting.values():
            event.set()
        return len(self.waiting)


def remove_mid_episode(drain_timeout_s: float | None, old_finishes: bool) -> tuple[dict[str, int], Any, list, dict]:
    """Three 2-turn episodes start on replica ``old``; ``new`` joins; ``old`` is removed during their first turn."""
    cfg = task(turns=2)

    async def go():
        router = Router.__ray_actor_class__({cfg.name: None})
        old, new = FakeReplica(opened=False), FakeReplica(opened=True)
        router.add_replica("old", old, "compute", 16)

        async def generate(prompt_ids: list[int], params: SamplingParams, key: str) -> Completion:
            return await router.generate(prompt_ids, params, key, cfg.name, 0)

        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, generate, SAMPLING, 4)
        episodes = [asyncio.create_task(runner.run(EpisodeSpec(f"e{i}", cfg.name, i))) for i in range(3)]
        while len(old.waiting) < 3:
            await asyncio.sleep(0.001)
        router.add_replica("new", new, "compute", 16)
        removal = asyncio.create_task(router.remove_replica("old", drain_timeout_s))
        await asyncio.sleep(0.01)
        assert not removal.done() or drain_timeout_s is not None
        if old_finishes:
            old.opened.set()
        outcome = await removal
        trajs = await asyncio.gather(*episodes)
        runner.close()
        return outcome, runner.stats, trajs, {"old": (old.served, old.aborted), "new": (new.served, new.aborted)}

    return asyncio.run(go())


def test_removed_replica_drains_its_in_flight_turns_and_later_turns_go_elsewhere():
    outcome, stats, trajs, replicas = remove_mid_episode(drain_timeout_s=None, old_finishes=True)
    assert outcome == {"drained": 3, "aborted": 0}
    assert replicas == {"old": (3, 0), "new": (3, 0)}  # first turns finished on old, second turns on new
    assert stats.finished == 3 and stats.failed == 0 and all(t.status == "ok" and t.num_turns == 2 for t in trajs)


def test_turns_still_running_after_the_drain_timeout_are_aborted_and_retried_elsewhere():
    outcome, stats, trajs, replicas = remove_mid_episode(drain_timeout_s=0.0, old_finishes=False)
    assert outcome == {"drained": 0, "aborted": 3}
    assert replicas == {"old": (0, 3), "new": (6, 0)}  # each aborted first turn re-ran on new, then its second
    assert stats.finished == 3 and stats.failed == 0 and all(t.status == "ok" and t.num_turns == 2 for t in trajs)
