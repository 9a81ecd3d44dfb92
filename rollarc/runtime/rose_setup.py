"""One ROSE set-up on the training path's actors: what ``rollarc bench rose`` and ``rollarc loadgen`` measure.

The actors are those ``rollarc train`` with ``harvest:`` runs: the co-serving replica
(:class:`~rollarc.runtime.coserving_replica.CoServingReplica`, started and lent by
:class:`~rollarc.runtime.harvest_pool.HarvestPool` with ``policy.lending.LendingPolicy``), a dedicated
:class:`~rollarc.runtime.rollout_worker.RolloutWorker`, and the :class:`~rollarc.runtime.router.Router`
(``policy.dispatcher.Dispatcher``) in front of both. Set-ups:

- ``alone``: the co-serving replica replays the trace window once; it is never lent and nothing else runs;
- ``dedicated``: the same, plus multi-turn rollouts through the Router on the dedicated worker only;
- ``harvest``: the same as ``dedicated``, and the HarvestPool lends the co-serving replica to the Router
  (pool ``borrowed``) while its guard reports headroom, and withdraws it when serving load rises.

Rollout trajectories are synthetic (a random prompt, then per turn ``gen_tokens`` generated and ``obs_tokens``
observed), and each turn goes through ``rollarc.agent.turn.generate_turn`` into the Router's ``generate`` as
the agent loop sends it, so a withdrawn turn resumes from its partial output as in training. Throughput is
counted the same way in both rollout set-ups: turns (and tokens) that came back through the Router between the
start and the moment the replica had served the whole window. Each actor is pinned to its cores
(``serving_cores``, ``rollout_cores``; ``rose.pinning``), and so are the rollout side's Router and this
driver (to ``rollout_cores``), so serving never shares a core with the rollout side's work. Nothing here decides: routing and lending are the scheduling core's, as in training.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ray

from rollarc.agent.turn import generate_turn, turn_seed
from rollarc.config import Config, SamplingConfig
from rollarc.config.cluster import ClusterConfig
from rollarc.config.harvest import HarvestConfig
from rollarc.config.io import validate
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models.checkpoint import new_policy, save_policy
from rollarc.rose.config import RoseConfig
from rollarc.rose.pinning import pin_process, pinned_here
from rollarc.rose.slo import RequestTiming
from rollarc.rose.trace import TraceRequest
from rollarc.runtime.harvest_pool import HarvestPool
from rollarc.runtime.ray_cluster import start_ray, stop_ray
from rollarc.runtime.rollout_worker import RolloutWorker
from rollarc.runtime.router import Router

Mode = Literal["alone", "dedicated", "harvest"]
TASK = "rose"  # the one task the synthetic trajectories belong to
DEDICATED_POOL = "dedicated"
DEDICATED = "dedicated-0"
POLL_S = 0.05  # how often the driver asks the co-serving replica how much of the window it has served


@dataclass(frozen=True)
class PolicySpec:
    """The rollout policy R (one checkpoint, loaded by every replica) and its engine.

    ``prefix_cache_tokens`` is 0 as in ``configs/harvest.yaml``'s ``engine:``, which training with ``harvest:``
    runs: a preempted or migrated turn prefills its prompt and partial output again, on either replica.
    """

    preset: str = "tiny"
    seed: int = 0
    max_model_len: int = 512
    max_num_seqs: int = 16
    prefix_cache_tokens: int = 0


@dataclass(frozen=True)
class RolloutShape:
    """Synthetic multi-turn trajectories: a prompt, then per turn ``gen_tokens`` generated + ``obs_tokens`` observed."""

    turns: int = 3
    prompt_tokens: int = 48
    gen_tokens: int = 16
    obs_tokens: int = 8
    in_flight: int = 48  # trajectories kept running at once (enough to fill both replicas)

    @property
    def longest(self) -> int:
        """Tokens of the last turn's prompt plus its output: the longest turn."""
        return self.prompt_tokens + self.turns * self.gen_tokens + (self.turns - 1) * self.obs_tokens


@dataclass
class SetupResult:
    mode: Mode
    window_s: float
    turns: int  # turns that came back through the Router in the window
    tokens: int  # their generated tokens
    turns_per_trajectory: int
    timings: list[RequestTiming]
    counters: dict[str, int]  # the co-serving replica's (pauses, preemptions, turns_done, ...)
    lending: dict[str, int]  # the HarvestPool's (lends, withdrawals, migrated_turns, drained_turns, ...)
    routed: dict[str, int]  # turns the Router finished per pool over the whole run
    pinned: dict[str, list[int]]
    turn_versions_ok: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def traj_per_s(self) -> float:
        """Trajectory-equivalents per second: turns / turns per trajectory / window (whole trajectories would
        quantise a short window)."""
        return self.turns / self.turns_per_trajectory / self.window_s if self.window_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.window_s if self.window_s > 0 else 0.0


def harvest_config(rose: RoseConfig) -> HarvestConfig:
    """The ``harvest:`` section of ``rose``'s settings: one co-serving replica, threads = its cores, and the SLO
    as given (the benchmark derives it itself, from its own serving-alone set-up, before it runs the others)."""
    return HarvestConfig(
        replicas=1,
        serving=rose.serving,
        slo_source="fixed",
        slo=rose.slo,
        margin=rose.margin,
        memory_tokens=rose.memory_tokens,
        replay=rose.replay,
        lend_after_s=rose.lend_after_s,
        withdraw_after_s=rose.withdraw_after_s,
        min_capacity=rose.min_capacity,
        budget_aftermath=rose.budget_aftermath,
        dedicated_first=rose.dedicated_first,
        threads=max(1, len(rose.serving_cores)),
    )


def training_config(rose: RoseConfig, policy: PolicySpec, shape: RolloutShape) -> Config:
    """The training config whose actors a set-up runs (its task only names the trajectories; no env runs)."""
    if shape.longest > policy.max_model_len:
        raise ValueError(
            f"a synthetic trajectory grows to {shape.longest} tokens, over the policy's max_model_len "
            f"{policy.max_model_len}: use fewer or shorter turns"
        )
    return validate(
        Config,
        {
            "name": "rose-bench",
            "seed": policy.seed,
            "model": {"preset": policy.preset, "max_position_embeddings": policy.max_model_len},
            "tasks": [
                {
                    "name": TASK,
                    "env": {"id": "frozen_lake"},
                    "agent": {
                        "max_turns": shape.turns,
                        "max_tokens_per_turn": shape.gen_tokens,
                        "context_limit": shape.longest,
                    },
                }
            ],
            "engine": {
                "max_num_seqs": policy.max_num_seqs,
                "max_model_len": policy.max_model_len,
                "prefix_cache_tokens": policy.prefix_cache_tokens,
                "seed": policy.seed,
            },
            "async": {"mode": "sync"},
            "harvest": harvest_config(rose).model_dump(),
        },
        source="rollarc bench rose",
    )


def defaults_record(rose: RoseConfig, policy: PolicySpec) -> dict[str, Any]:
    """The settings the benchmark shares with training's ``configs/harvest.yaml``, as the JSON records them: a
    figure measured with others (``rose.json`` before 2026-12-05: dedicated first, an 8192-token prefix cache)
    says so by them."""
    harvest = harvest_config(rose)
    return {
        "dedicated_first": harvest.dedicated_first,
        "prefix_cache_tokens": policy.prefix_cache_tokens,
        "drain_timeout_s": harvest.drain_timeout_s,  # migration: drained this long, then resumed elsewhere
    }


def write_policy(policy: PolicySpec, directory: Path) -> tuple[str, int]:
    """Save a fresh policy R into ``directory``; returns its path and vocabulary size."""
    model, tokenizer = new_policy(policy.preset, policy.max_model_len, seed=policy.seed)
    path = save_policy(model, tokenizer, directory / "policy")
    return str(path), int(model.config.vocab_size)


@contextmanager
def rose_cluster() -> Iterator[None]:
    """A local Ray cluster for the set-ups (every core; the actors reserve none and pin themselves)."""
    start_ray(ClusterConfig())
    try:
        yield
    finally:
        stop_ray()


def versions_ok(completion: Completion, max_tokens: int) -> bool:
    """Every token of a turn has a log-prob and version 0, the only version published (no update runs here)."""
    n = len(completion.token_ids)
    return n <= max_tokens and len(completion.logprobs) == n and list(completion.token_versions) == [0] * n


def run_setup(
    mode: Mode,
    rose: RoseConfig,
    trace: list[TraceRequest],
    *,
    policy_dir: str,
    vocab_size: int,
    policy: PolicySpec | None = None,
    shape: RolloutShape | None = None,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> SetupResult:
    """Run one set-up on a started Ray cluster (:func:`rose_cluster`): its actors are started and killed here."""
    if not trace:
        raise ValueError("the trace window is empty: nothing to serve")
    policy = policy or PolicySpec()
    shape = shape or RolloutShape()
    cfg = training_config(rose, policy, shape)
    router = Router.options(num_cpus=0, max_concurrency=10_000).remote(  # type: ignore[attr-defined]
        {TASK: None}, dedicated_first=rose.dedicated_first
    )
    actors: list[Any] = [router]
    pool: HarvestPool | None = None
    try:
        router_cores = pin_process(ray.get(router.__ray_call__.remote(_pid)), rose.rollout_cores)
        dedicated = None
        if mode != "alone":
            dedicated = RolloutWorker.options(num_cpus=0, max_concurrency=10_000).remote(  # type: ignore[attr-defined]
                DEDICATED,
                policy_dir,
                cfg.engine,
                cfg.async_.in_flight_update,
                max(1, len(rose.rollout_cores)),
                DEDICATED_POOL,
                0,
                cfg.sync,
                None,  # no trainer: no weight update runs in a set-up
                "cpu",  # as the co-serving replica, which builds its engines on the CPU: the same hardware for both
                cfg.engine.dtype or cfg.model.dtype,
                cores=rose.rollout_cores,
            )
            actors.append(dedicated)
            ray.get(dedicated.ping.remote())  # built before serving starts, so it runs for the whole window
            ray.get(router.add_replica.remote(DEDICATED, dedicated, DEDICATED_POOL, cfg.engine.max_num_seqs))
        # starts the co-serving replica, which starts replaying the window at once (no trainer: no update runs)
        pool = HarvestPool(
            cfg, router, None, policy_dir, 0, replica_options={"trace": trace, "cores": rose.serving_cores}
        )
        actors += list(pool.replicas.values())
        (serve,) = pool.replicas.values()
        drive = _Drive(mode, router, pool, serve, len(trace), shape, vocab_size, seed, timeout_s)
        with pinned_here(rose.rollout_cores) as driver_cores:
            window_s, finished, ok = asyncio.run(drive.run())
        served = ray.get(serve.served_timings.remote())
        report = ray.get(serve.headroom.remote())
        routed = ray.get(router.routing_stats.remote())["turns"]
        pinned = {"serve": list(served["pinned"]), "router": router_cores, "driver": driver_cores}
        if dedicated is not None:
            pinned["dedicated"] = list(ray.get(dedicated.stats.remote())["pinned"])
        timings = sorted((RequestTiming(*row) for row in served["timings"]), key=lambda t: t.arrival_s)
        return SetupResult(
            mode=mode,
            window_s=window_s,
            turns=len(finished),
            tokens=sum(finished),
            turns_per_trajectory=shape.turns,
            timings=timings[: len(trace)],
            counters={key: int(value) for key, value in report["counters"].items()},
            lending=dict(pool.counters),
            routed={key.split("@", 1)[1]: int(n) for key, n in routed.items()},
            pinned=pinned,
            turn_versions_ok=ok,
            extra={"serving_model": served["serving_model"], "rollout_model": served["rollout_model"]},
        )
    finally:
        for actor in actors:
            ray.kill(actor)
        if pool is not None:
            _wait_gone(list(pool.replicas))


def _pid(_actor: Any) -> int:
    """The process id of the actor it runs in (``actor.__ray_call__``), to pin it from here."""
    return os.getpid()


def _wait_gone(names: list[str], timeout_s: float = 30.0) -> None:
    """Wait until the killed named actors are gone, so the next set-up can take their names."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.05)


class _Drive:
    """The driver's loop of one set-up: trajectories through the Router, the HarvestPool's lending, the window."""

    def __init__(
        self,
        mode: Mode,
        router: Any,
        pool: HarvestPool,
        serve: Any,
        requests: int,
        shape: RolloutShape,
        vocab_size: int,
        seed: int,
        timeout_s: float,
    ) -> None:
        self.mode, self.router, self.pool, self.serve = mode, router, pool, serve
        self.requests, self.shape, self.vocab_size, self.seed = requests, shape, vocab_size, seed
        self.timeout_s = timeout_s
        self.rng = random.Random(seed + 1)
        self.sampling = SamplingConfig()
        self.finished: list[tuple[float, int]] = []  # (when, generated tokens) of every turn that came back
        self.ok = True
        self._serial = 0

    async def run(self) -> tuple[float, list[int], bool]:
        """Returns the window (s), the generated tokens of each turn finished in it, and whether all turns'
        token versions were valid."""
        start = time.perf_counter()
        tasks = (
            [asyncio.create_task(self._trajectories()) for _ in range(self.shape.in_flight)]
            if self.mode != "alone"
            else []
        )
        try:
            end = await self._until_served(start, tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        window = [tokens for when, tokens in self.finished if when <= end]
        return end - start, window, self.ok

    async def _until_served(self, start: float, tasks: list[asyncio.Task[None]]) -> float:
        while True:
            if self.mode == "harvest":
                await asyncio.to_thread(self.pool.tick)  # lend / withdraw, as the training driver does
            served = (await self.serve.headroom.remote())["counters"]["served"]
            now = time.perf_counter()
            if served >= self.requests:
                return now
            for task in tasks:
                if task.done():
                    task.result()  # a trajectory failed: raise it here
            if now - start > self.timeout_s:
                raise TimeoutError(f"ROSE {self.mode} set-up served {served}/{self.requests} in {self.timeout_s} s")
            await asyncio.sleep(min(POLL_S, self.pool.harvest.poll_s))

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        completion: Completion = await self.router.generate.remote(prompt_ids, params, cache_key, TASK, None)
        return completion

    async def _trajectories(self) -> None:
        """One slot: trajectories one after another, each turn through the Router as the agent loop sends it."""
        shape = self.shape
        while True:
            traj = f"traj{self._serial}"
            self._serial += 1
            prompt = [self.rng.randrange(1, self.vocab_size) for _ in range(shape.prompt_tokens)]
            for turn in range(shape.turns):
                generated = await generate_turn(
                    self._generate, prompt, shape.gen_tokens, self.sampling, traj, turn_seed(self.seed, traj, turn)
                )
                completion = generated.completion
                self.finished.append((time.perf_counter(), len(completion.token_ids)))
                self.ok &= versions_ok(completion, shape.gen_tokens)
                observation = [self.rng.randrange(1, self.vocab_size) for _ in range(shape.obs_tokens)]
                prompt = prompt + list(completion.token_ids) + observation
            await self.router.release.remote(traj)
