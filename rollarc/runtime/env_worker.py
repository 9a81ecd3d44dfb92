"""EnvWorker: a Ray async actor on the CPU pool that runs many trajectories at once.

Environments are stateful and stay pinned here. Each trajectory is its own asyncio task (the agent
loop); env steps run in the worker's thread pool. A group request starts ``G + r`` rollouts of one task
seed (redundancy) and returns as soon as the kept ones are decided (``async.redundancy_keep``, the rule in
:mod:`rollarc.policy.redundancy`); the rest are cancelled and their in-flight turns aborted at the router.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
import torch

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.trajectory import Trajectory
from rollarc.config import SamplingConfig, TaskConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models.checkpoint import load_tokenizer
from rollarc.policy.redundancy import KeepRule, RolloutState, kept_rollouts
from rollarc.report.metrics import process_rss_mb
from rollarc.runtime.router import TurnArgs
from rollarc.runtime.turn_resend import TURN_LOST, lost_turn, send_until_answered

if TYPE_CHECKING:
    from rollarc.rewards.service import RewardClientSpec  # type only: importing it at run time loads Ray Serve


@dataclass(frozen=True)
class GroupSpec:
    group_id: str
    index: int  # global group counter (the env seed is derived from it)
    task: str
    seed: int
    size: int  # G
    redundancy: int  # r
    sampling_seed: int | None
    step: int  # version the controller had published when it admitted the group
    keep: KeepRule = "by_index"  # async.redundancy_keep: which G of the G + r rollouts are kept
    attempt: int = 0  # stale restarts so far (on_stale: restart); each attempt has its own sampling seed


@dataclass
class GroupResult:
    spec: GroupSpec
    trajectories: list[Trajectory]
    failed: list[Trajectory] = field(default_factory=list)
    cancelled: int = 0
    dropped: int = 0  # finished well but not kept (a spare not needed, or past G in one pass); not trained
    worker: str = ""
    seconds: float = 0.0
    rss_mb: float = 0.0
    router_resends: int = 0  # the worker's count so far: times it sent turns again after the router died
    stuck_env_threads: int = 0  # the worker's env threads stuck in env code now (every pool)

    @property
    def order(self) -> int:
        return self.spec.index

    @property
    def min_version(self) -> int:
        versions = [t.min_version for t in self.trajectories if t.versions]
        return min(versions) if versions else -1

    @property
    def max_version(self) -> int:
        """The newest version among the kept trajectories' tokens: the group is dropped only if it is too stale."""
        versions = [t.max_version for t in self.trajectories if t.versions]
        return max(versions) if versions else -1


@ray.remote
class EnvWorker:
    def __init__(
        self,
        name: str,
        tasks: dict[str, TaskConfig],
        tokenizer_dir: str,
        sampling: SamplingConfig,
        router: Any,
        threads: int,
        max_env_threads: int,
        trajectory_timeout_s: float,
        seed: int = 0,
        reward_spec: RewardClientSpec | None = None,
        reward_weight: float = 1.0,
        max_stuck_env_threads: int = 128,
    ):
        torch.set_num_threads(threads)
        self.name = name
        self.router = router
        self.trajectory_timeout_s = trajectory_timeout_s
        self.renderer = ChatRenderer(load_tokenizer(tokenizer_dir))
        self._spans: list[dict[str, Any]] = []
        self._step = 0
        self._traj_task: dict[str, str] = {}
        self.reward_client = None
        if reward_spec is not None:
            from rollarc.rewards.service import connect  # deferred: Ray Serve is heavy

            self.reward_client = connect(reward_spec)
        self.runner = EpisodeRunner(
            tasks,
            self.renderer,
            self._generate,
            sampling,
            max_env_threads=max_env_threads,
            span_sink=self._spans.append,
            worker_name=name,
            latency_seed=seed,
            reward_fn=self.reward_client.score if self.reward_client else None,
            reward_weight=reward_weight,
            max_stuck_threads=max_stuck_env_threads,
        )
        self._groups: dict[str, list[asyncio.Task]] = {}
        self._turns: list[tuple[TurnArgs, asyncio.Future[Completion]]] = []  # queued for the next router call
        self._sending: set[asyncio.Task] = set()
        self._releases: list[str] = []  # finished trajectories, queued for the next router call
        self.router_resends = 0  # times turns were sent again after the router died mid-call

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        """Queue the turn; the turns queued within one pass of the event loop go to the router in one call.

        The ``G`` rollouts of a group (and every group started together) reach their first turn in the same
        pass, so a step of short single-turn work costs a few Ray calls rather than two per rollout.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        self._turns.append(((prompt_ids, params, cache_key, self._traj_task.get(cache_key), self._step), future))
        if len(self._turns) == 1:
            loop.call_soon(self._flush_turns)
        try:
            return await future
        except TURN_LOST as err:  # no replica after every failover: this trajectory fails (counted), not the group
            raise lost_turn(err) from None

    def _flush_turns(self) -> None:
        turns, self._turns = self._turns, []
        task = asyncio.ensure_future(self._send_turns(turns))
        self._sending.add(task)  # a reference, so the task is not garbage-collected mid-flight
        task.add_done_callback(self._sending.discard)

    async def _send_turns(self, turns: list[tuple[TurnArgs, asyncio.Future[Completion]]]) -> None:
        """One router call; each completion streams back (in chunks), and resumes its trajectory, as soon as it is
        done. If the router dies mid-call, the turns it had not answered are sent again (``turn_resend``)."""

        def open_stream(indices: list[int]) -> Any:
            return self.router.generate_batch.remote([turns[i][0] for i in indices])

        await send_until_answered(open_stream, [future for _, future in turns], on_resend=self._count_resend)

    def _count_resend(self) -> None:
        # Counted as each resend starts, not when the call returns: the resent turns' trajectories (and their
        # group, whose result reports the count) can finish before the resent stream's end reaches this worker.
        self.router_resends += 1

    async def _run_one(self, spec: EpisodeSpec) -> Trajectory:
        self._traj_task[spec.traj_id] = spec.task
        try:
            return await asyncio.wait_for(self.runner.run(spec), self.trajectory_timeout_s)
        except asyncio.CancelledError:
            self.router.abort_key.remote(spec.traj_id)
            raise
        except TimeoutError:
            self.router.abort_key.remote(spec.traj_id)
            return Trajectory(
                traj_id=spec.traj_id, task=spec.task, seed=spec.seed, group_id=spec.group_id, worker=self.name
            ).fail(f"trajectory timeout after {self.trajectory_timeout_s:g} s", kind="trajectory_timeout")
        finally:
            self._traj_task.pop(spec.traj_id, None)
            self._release(spec.traj_id)

    def _release(self, traj_id: str) -> None:
        """Queue the router's release of a finished trajectory; those queued within one loop pass go in one call.

        One fire-and-forget Ray call per trajectory was the EnvWorker's largest cost on short work (64 a step).
        """
        self._releases.append(traj_id)
        if len(self._releases) == 1:
            asyncio.get_running_loop().call_soon(self._flush_releases)

    def _flush_releases(self) -> None:
        keys, self._releases = self._releases, []
        self.router.release_many.remote(keys)

    async def run_group(self, spec: GroupSpec) -> GroupResult:
        start = time.perf_counter()
        self._step = spec.step
        specs = [
            EpisodeSpec(
                traj_id=f"{spec.group_id}-{i}",
                task=spec.task,
                seed=spec.seed,
                group_id=spec.group_id,
                sampling_seed=None if spec.sampling_seed is None else spec.sampling_seed + i,
            )
            for i in range(spec.size + spec.redundancy)
        ]
        tasks = [asyncio.create_task(self._run_one(s)) for s in specs]
        index_of = {task: i for i, task in enumerate(tasks)}
        self._groups[spec.group_id] = tasks
        states: list[RolloutState] = ["running"] * len(tasks)
        finished: dict[int, Trajectory] = {}

        def record(task: asyncio.Task) -> None:
            traj = task.result()
            finished[index_of[task]] = traj
            states[index_of[task]] = "ok" if traj.status == "ok" else "failed"

        pending = set(tasks)
        try:
            kept = kept_rollouts(states, spec.size, spec.keep)
            while kept is None:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    record(task)
                kept = kept_rollouts(states, spec.size, spec.keep)
            # ended in the same pass as the decision: an outcome (failed or dropped), not a cancel
            for task in [t for t in pending if t.done() and not t.cancelled()]:
                pending.discard(task)
                record(task)
        finally:
            for task in pending:
                task.cancel()
            self._groups.pop(spec.group_id, None)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        failed = [finished[i] for i in sorted(finished) if states[i] == "failed"]
        return GroupResult(
            spec=spec,
            trajectories=[finished[i] for i in kept],
            failed=failed,
            cancelled=len(pending),
            dropped=sum(state == "ok" for state in states) - len(kept),
            worker=self.name,
            seconds=time.perf_counter() - start,
            rss_mb=process_rss_mb(),
            router_resends=self.router_resends,
            stuck_env_threads=self.runner.stuck_threads(),
        )

    async def run_groups(self, specs: list[GroupSpec]) -> list[GroupResult]:
        """Several groups started in one pass of the event loop, so their first turns reach the router in one
        batch; the results, in order, once all are done (the synchronous controller needs all of them)."""
        return list(await asyncio.gather(*[self.run_group(spec) for spec in specs]))

    async def cancel_group(self, group_id: str) -> int:
        tasks = self._groups.get(group_id, [])
        for task in tasks:
            task.cancel()
        return len(tasks)

    async def run_episodes(self, specs: list[EpisodeSpec]) -> list[Trajectory]:
        """Independent episodes (held-out evaluation): all at once, results in order."""
        return list(await asyncio.gather(*[self._run_one(s) for s in specs]))

    def stats(self) -> dict[str, Any]:
        s = self.runner.stats
        return {
            "name": self.name,
            "started": s.started,
            "finished": s.finished,
            "failed": s.failed,
            "env_timeouts": s.env_timeouts,
            "env_errors": s.env_errors,
            "injected_failures": s.injected_failures,
            "hung_threads": s.hung_threads,
            "stuck_threads": self.runner.stuck_threads(),
            "stuck_threads_peak": s.stuck_threads_peak,
            "pool_replacements": s.pool_replacements,
            **s.failures.as_dict(),
            "running_groups": len(self._groups),
        }

    def drain_spans(self) -> list[dict[str, Any]]:
        spans, self._spans[:] = list(self._spans), []
        return spans

    def ping(self) -> str:
        return self.name
