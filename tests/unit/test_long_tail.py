"""The long-tail paths, each driven in-process (no Ray) and each asserting a counted outcome.

- group redundancy (``async.redundancy``): under ``redundancy_keep: by_index`` a spare replaces only a failed
  rollout and a slow one is waited for; under ``first_finished`` the first G to finish are kept; the rest
  are cancelled and aborted;
- the trajectory timeout (``async.trajectory_timeout_s``): that trajectory fails and its turn is aborted;
- the hung-env monitor: when half the env thread pool is stuck, a fresh pool is swapped in;
- ``async.in_flight_update: abort``: running turns are aborted when new weights arrive, resume from their
  partial output, and later turns run on the new weights;
- ``async.on_stale: restart``: a group too stale to train is run again (fresh sampling seeds, capped), not dropped.

The Ray actors are driven through their undecorated classes (``Actor.__ray_actor_class__``), with fakes for
the handles they call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.agent.turn import generate_turn
from rollarc.engine.config import EngineConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.policy.redundancy import KeepRule
from rollarc.runtime.env_worker import EnvWorker, GroupResult, GroupSpec
from rollarc.runtime.rollout_worker import RolloutWorker
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher
from tests.unit.test_agent_loop import RENDERER, SAMPLING, ScriptedEngine, task


class Remote:
    """``handle.method.remote(...)``: awaited calls return the coroutine; fire-and-forget ones run at once."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


class FakeRouter:
    """Replies "U" at once, except to the trajectories in ``hang``, whose turns never finish, and to those in
    ``after``, whose turn waits until the trajectory named there has ended (been released)."""

    def __init__(self, hang: set[str], after: dict[str, str] | None = None):
        self.hang = hang
        self.after = after or {}
        self.ended: dict[str, asyncio.Event] = {}
        self.aborted: list[str] = []
        self.released: list[str] = []
        self.generate = Remote(self._generate)
        self.generate_batch = Remote(self._generate_batch)
        self.abort_key = Remote(self.aborted.append)
        self.release_calls: list[list[str]] = []
        self.release_many = Remote(self._release_many)

    def _release_many(self, keys: list[str]) -> None:
        self.release_calls.append(list(keys))
        self.released += keys
        for key in keys:
            self.ended.setdefault(key, asyncio.Event()).set()

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, key: str, *_: Any) -> Completion:
        if key in self.hang:
            await asyncio.Event().wait()
        if key in self.after:
            await self.ended.setdefault(self.after[key], asyncio.Event()).wait()
        ids = RENDERER.encode_reply("U")
        return Completion(key, len(prompt_ids), ids, [-0.5] * len(ids), [0] * len(ids), 0, "stop")

    async def _generate_batch(self, turns: list[tuple[Any, ...]]) -> AsyncIterator[asyncio.Future]:
        """As ``Router.generate_batch``: refs to chunks ``[(index, completion), ...]``, as soon as turns are done."""
        pending = {asyncio.ensure_future(self._generate(*args[:3])): i for i, args in enumerate(turns)}
        try:
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                ref: asyncio.Future = asyncio.get_running_loop().create_future()
                ref.set_result(sorted((pending.pop(turn), turn.result()) for turn in done))
                yield ref
        finally:
            for turn in pending:
                turn.cancel()


def run_group(
    nano_policy_dir: Path,
    hang: set[str],
    size: int,
    redundancy: int,
    timeout_s: float = 60.0,
    keep: KeepRule = "by_index",
    after: dict[str, str] | None = None,
):
    cfg = task(turns=1)
    router = FakeRouter(hang, after)

    async def go() -> GroupResult:
        worker = EnvWorker.__ray_actor_class__(
            "env-0", {cfg.name: cfg}, str(nano_policy_dir), SAMPLING, router, 1, 4, timeout_s
        )
        try:
            return await worker.run_group(GroupSpec("g0", 0, cfg.name, 1, size, redundancy, None, 0, keep))
        finally:
            worker.runner.close()

    return asyncio.run(go()), router


def test_first_finished_redundancy_keeps_the_first_g_and_cancels_and_aborts_the_rest(nano_policy_dir):
    result, router = run_group(nano_policy_dir, hang={"g0-1", "g0-3"}, size=2, redundancy=2, keep="first_finished")
    assert [t.traj_id for t in result.trajectories] == ["g0-0", "g0-2"]
    assert result.cancelled == 2 and result.failed == [] and result.dropped == 0
    assert sorted(router.aborted) == ["g0-1", "g0-3"]  # their in-flight turns are aborted at the router
    assert sorted(router.released) == ["g0-0", "g0-1", "g0-2", "g0-3"]
    # released in batches (those ending in one pass of the event loop), not one Ray call per trajectory
    assert len(router.release_calls) < 4, router.release_calls


def run_slow_and_failed(nano_policy_dir: Path, keep: KeepRule):
    """G = 3, r = 2: rollout 1 hangs (fails at the timeout); rollout 2 is slow but ends well (after spare 4)."""
    return run_group(nano_policy_dir, {"g0-1"}, 3, 2, timeout_s=0.3, keep=keep, after={"g0-2": "g0-4"})


def test_by_index_replaces_a_failed_rollout_by_the_first_spare_and_keeps_a_slow_one(nano_policy_dir):
    result, router = run_slow_and_failed(nano_policy_dir, "by_index")
    assert [t.traj_id for t in result.trajectories] == ["g0-0", "g0-2", "g0-3"]
    assert [t.traj_id for t in result.failed] == ["g0-1"]
    assert result.dropped == 1 and result.cancelled == 0  # spare g0-4 ended well before it was known unneeded
    assert len(result.trajectories) + len(result.failed) + result.dropped + result.cancelled == 5
    assert router.aborted == ["g0-1"]


def test_first_finished_drops_the_slow_rollout_in_the_same_group(nano_policy_dir):
    result, router = run_slow_and_failed(nano_policy_dir, "first_finished")
    assert [t.traj_id for t in result.trajectories] == ["g0-0", "g0-3", "g0-4"]
    assert result.failed == [] and result.dropped == 0 and result.cancelled == 2
    assert sorted(router.aborted) == ["g0-1", "g0-2"]


def test_by_index_cancels_the_spares_once_the_first_g_ended_well(nano_policy_dir):
    result, router = run_group(nano_policy_dir, hang={"g0-2", "g0-3"}, size=2, redundancy=2)
    assert [t.traj_id for t in result.trajectories] == ["g0-0", "g0-1"]
    assert result.cancelled == 2 and result.failed == [] and result.dropped == 0
    assert sorted(router.aborted) == ["g0-2", "g0-3"]


def test_trajectories_that_end_in_one_pass_of_the_event_loop_are_released_in_one_router_call(nano_policy_dir):
    router = FakeRouter(set())

    async def go() -> None:
        cfg = task(turns=1)
        worker = EnvWorker.__ray_actor_class__(
            "env-0", {cfg.name: cfg}, str(nano_policy_dir), SAMPLING, router, 1, 4, 60.0
        )
        try:
            for i in range(8):
                worker._release(f"g0-{i}")
            await asyncio.sleep(0)  # the flush runs at the next pass
            worker._release("g1-0")
            await asyncio.sleep(0)
        finally:
            worker.runner.close()

    asyncio.run(go())
    assert router.release_calls == [[f"g0-{i}" for i in range(8)], ["g1-0"]]


def test_trajectory_timeout_fails_that_trajectory_and_aborts_its_turn(nano_policy_dir):
    result, router = run_group(nano_policy_dir, hang={"g0-1"}, size=2, redundancy=0, timeout_s=0.2)
    assert [t.traj_id for t in result.trajectories] == ["g0-0"]
    assert [(t.traj_id, t.failure_reason) for t in result.failed] == [("g0-1", "trajectory timeout after 0.2 s")]
    assert result.cancelled == 0 and router.aborted == ["g0-1"]


def test_half_the_env_pool_stuck_swaps_in_a_fresh_pool_and_other_episodes_still_run():
    hanging = task(turns=1, hang_on_seed_mod=2, hang_s=3.0, step_timeout_s=0.1)

    async def go():
        runner = EpisodeRunner({hanging.name: hanging}, RENDERER, ScriptedEngine(), SAMPLING, max_env_threads=4)
        old_pool = runner._executor
        stuck = await asyncio.gather(*[runner.run(EpisodeSpec(f"h{i}", hanging.name, 2 * i)) for i in range(2)])
        swapped = runner._executor is not old_pool
        fine = await asyncio.gather(*[runner.run(EpisodeSpec(f"f{i}", hanging.name, 2 * i + 1)) for i in range(4)])
        runner.close()
        return stuck, fine, runner.stats, swapped

    stuck, fine, stats, swapped = asyncio.run(go())
    assert all(t.status == "failed" and "timed out after 0.1 s" in t.failure_reason for t in stuck)
    assert stats.env_timeouts == 2 and stats.hung_threads == 2 and stats.pool_replacements == 1 and swapped
    assert [t.status for t in fine] == ["ok"] * 4 and stats.finished == 6 and stats.failed == 2


def test_stuck_threads_are_counted_across_replaced_pools_and_bounded_by_the_cap():
    """A replaced pool's stuck threads live on: they still count, and at the cap no new env call starts."""
    hanging = task(turns=1, hang_on_seed_mod=1, hang_s=3.0, step_timeout_s=0.05)

    async def go():
        runner = EpisodeRunner(
            {hanging.name: hanging}, RENDERER, ScriptedEngine(), SAMPLING, max_env_threads=2, max_stuck_threads=3
        )
        first = [await runner.run(EpisodeSpec(f"h{i}", hanging.name, i)) for i in range(4)]
        peak = (runner.stats.stuck_threads, runner.stats.pool_replacements, runner.stats.env_timeouts)
        runner.close()
        return first, peak, runner.stats

    first, (stuck, replacements, timeouts), stats = asyncio.run(go())
    # each pool of 2 is replaced once 1 thread is stuck; the first 3 trajectories hang one thread each
    assert [t.status for t in first] == ["failed"] * 4
    assert [t.failure_kind for t in first[:3]] == ["env_step_timeout"] * 3
    assert first[3].failure_kind == "env_construction_threads_exhausted"  # not even an env is built
    assert "3 env threads of env-0 are stuck in env code (cap 3)" in first[3].failure_reason
    assert (stuck, replacements, timeouts) == (3, 3, 3)  # no 4th thread was started
    assert stats.stuck_threads_peak == 3


# ---- in_flight_update: abort -------------------------------------------------------------------------


def done(value: Any) -> asyncio.Future:
    """An object-store reference in-process: a finished future (call inside the event loop)."""
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def test_abort_mode_aborts_running_turns_on_update_and_later_turns_use_the_new_weights(nano_policy_dir):
    from rollarc.models import load_policy

    start = {n: t.clone() for n, t in load_policy(nano_policy_dir)[0].state_dict().items()}
    publisher = WeightPublisher(SyncConfig())
    publisher.publish(start, version=0)
    publisher.publish({n: t + 0.01 if t.is_floating_point() else t for n, t in start.items()}, version=1)
    updates = publisher.latest(WHOLE)
    trainer = type("Trainer", (), {"fetch_weights": Remote(lambda have: done(publisher.fetch(WHOLE, have)))})()
    params = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)

    async def go():
        worker = RolloutWorker.__ray_actor_class__(
            "rollout-0",
            str(nano_policy_dir),
            EngineConfig(max_num_seqs=8),
            "abort",
            1,
            "compute",
            0,
            SyncConfig(),
            trainer,
        )
        running = [asyncio.create_task(worker.generate([3, 40, 5, 4], params, f"k{i}")) for i in range(3)]
        while len(worker._running) < 3:
            await asyncio.sleep(0.001)
        await worker.update_weights(SyncPayload(version=1, method="full", refs=[done(updates)]))
        aborted = await asyncio.gather(*running)
        after = await worker.generate([3, 40, 5, 4], SamplingParams(temperature=0.0, max_tokens=4), "later")
        weights = worker.engine_weights()
        worker.engine.shutdown()
        return aborted, after, weights

    aborted, after, weights = asyncio.run(go())
    assert [c.finish_reason for c in aborted] == ["abort"] * 3  # none ran to its 200 tokens
    assert all(set(c.token_versions) <= {0} for c in aborted)
    assert after.finish_reason == "length" and after.token_versions == [1] * 4
    assert all(torch.equal(weights[n], publisher.shard(WHOLE)[n]) for n in weights)


def test_abort_mode_turns_resume_from_their_partial_output_under_the_new_version(nano_policy_dir):
    # The update carries the same weights under version 1, so the resumed turn must be the uninterrupted one.
    from rollarc.models import load_policy

    start = {n: t.clone() for n, t in load_policy(nano_policy_dir)[0].state_dict().items()}
    publisher = WeightPublisher(SyncConfig())
    publisher.publish(start, version=0)
    publisher.publish({n: t.clone() for n, t in start.items()}, version=1)
    updates = publisher.latest(WHOLE)
    trainer = type("Trainer", (), {"fetch_weights": Remote(lambda have: done(publisher.fetch(WHOLE, have)))})()
    prompt = [3, 40, 5, 4]

    async def go():
        worker = RolloutWorker.__ray_actor_class__(
            "rollout-0", str(nano_policy_dir), EngineConfig(max_num_seqs=8), "abort", 1, "compute", 0, SyncConfig(),
            trainer,
        )  # fmt: skip

        def generate(prompt_ids, params, cache_key):  # every token to the budget: the turn cannot end early
            return worker.generate(prompt_ids, replace(params, ignore_eos=True), cache_key)

        whole = await generate_turn(generate, prompt, 200, SAMPLING, "w", seed=11)
        cut = asyncio.create_task(generate_turn(generate, prompt, 200, SAMPLING, "t", seed=11))
        while not any(len(r.output_ids) >= 5 for r in list(worker.engine.engine._requests.values())):
            await asyncio.sleep(0.001)
        await worker.update_weights(SyncPayload(version=1, method="full", refs=[done(updates)]))
        turn = await cut
        worker.engine.shutdown()
        return whole, turn

    whole, turn = asyncio.run(go())
    k = turn.kept_tokens
    assert turn.resumes == 1 and 5 <= k < 200
    assert whole.completion.token_versions == [0] * 200
    assert turn.completion.token_ids == whole.completion.token_ids  # the prefix kept, the rest the same draws
    assert turn.completion.token_versions == [0] * k + [1] * (200 - k)
    assert turn.completion.logprobs == pytest.approx(whole.completion.logprobs, abs=1e-4)


# ---- on_stale: restart --------------------------------------------------------------------------------


def trajectory(traj_id: str, version: int) -> Trajectory:
    seg = Segment()
    seg.extend_context([1, 2])
    seg.extend_generated([3], [-1.0], [version])
    return Trajectory(traj_id=traj_id, task="t", seed=0, segments=[seg], reward=1.0)


def test_on_stale_restart_runs_a_too_stale_group_again_with_fresh_seeds_at_most_max_restarts_times(tmp_path):
    from rollarc.config import Config
    from rollarc.config.io import validate
    from rollarc.runtime.controller import Controller

    submitted: list[GroupSpec] = []
    env = type("Env", (), {"run_group": Remote(lambda spec: submitted.append(spec) or object())})()
    workers = type("Workers", (), {"env": {"env-0": env}, "least_loaded_env": lambda self, pending: "env-0"})()
    cfg = validate(
        Config,
        {
            "tasks": [{"name": "t", "env": {"id": "sokoban"}}],
            "train": {"groups_per_step": 1, "group_size": 2},
            "async": {"mode": "async", "max_staleness": 1, "on_stale": "restart", "max_restarts": 1},
            "run": {"tensorboard": False, "progress": False},
        },
    )
    controller = Controller(cfg, tmp_path, workers)
    controller.plan.start()  # (its evaluation before RL is not run here)
    controller._drain()  # k = 1, B = 1: two groups in flight
    scheduling = controller.scheduling
    assert scheduling.group_finished(1, 2, 0, 0)  # g1 finished first: the step from version 0 trains it
    assert [g.group for g in scheduling.form_batch().batch.groups] == [1]
    scheduling.weights_published(1)
    controller._drain()  # g2
    assert scheduling.group_finished(2, 2, 1, 1)  # g2: the step from version 1
    assert [g.group for g in scheduling.form_batch().batch.groups] == [2]
    scheduling.weights_published(2)
    assert [s.group_id for s in submitted] == ["g0", "g1", "g2"]
    slow = GroupResult(spec=submitted[0], trajectories=[trajectory("g0-0", 0), trajectory("g0-1", 0)])
    controller.finished[0] = slow  # staleness 2 - 0 > k at the next step
    assert scheduling.group_finished(0, 2, 0, 0)  # no token within k: not trained
    controller._drain()  # the stale group is queued to run again, and runs again at once
    assert controller._train_ref is None
    assert controller.counters.restarted_stale == 1 and controller.counters.dropped_stale == 0
    again, first = submitted[3], submitted[0]
    # the same group (index, task, env seed) runs again, first in line, but samples anew: the same seeds would
    # draw the same slow episode and the same env latencies
    assert (again.group_id, again.index, again.task, again.seed) == (first.group_id, 0, "t", first.seed)
    assert again.attempt == 1 and again.sampling_seed != first.sampling_seed and again.step == 2
    controller.finished[0] = GroupResult(spec=again, trajectories=slow.trajectories)
    scheduling.weights_published(4)  # (as if) two more steps passed: stale again, and the cap is reached
    scheduling.core.next_train_version = 4
    assert scheduling.group_finished(0, 2, 2, 2)
    controller._drain()
    assert controller._train_ref is None
    assert controller.counters.restarted_stale == 1 and controller.counters.dropped_stale == 1
    assert controller.dropped_by_task == {"t": 1} and 0 not in controller.specs
