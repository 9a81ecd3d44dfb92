"""The discrete-event simulation of a whole RL training run (SimPy).

Orchestration only: every duration comes from the cost objects in the :class:`SimSetup` (which
come from :mod:`rollarc.cluster`), so the simulator holds no cost formula of its own.

- Each trajectory is a SimPy process running the agent loop: generate → env step → generate …,
  then its reward. It sticks to one engine (its KV prefix stays there), chosen on its first turn by
  the less loaded of two random engines of its task's pool (routing ``affinity``), or of every
  rollout pool regardless of its task (routing ``random``, the task-oblivious baseline).
- The trainer process takes ``B`` complete groups, trains, and publishes weights. A group is usable
  at step ``t`` if its oldest policy version is at least ``t − k``; others are dropped and counted.
  Groups are launched while ``outstanding < (engine_version + k + 1 − steps_started) · B``, which
  fills the pipeline ``k`` steps ahead (ROLL's async ratio); ``k = 0`` is exactly synchronous: the
  next batch starts only when the new weights are on the engines.
- Sync mode puts the weight transfer on the critical path; async mode overlaps it with training
  (the engines only pause for the swap).
- A run's time ends when the last step's weights are on the engines, so in sync mode without
  variance the step time is exactly rollout + reward + train + sync + swap.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from rollarc.cluster.distributions import sampler
from rollarc.sim.engine import SimEngine
from rollarc.sim.result import PoolReport, SimResult
from rollarc.sim.serverless import ServerlessPool
from rollarc.sim.servers import FifoServers
from rollarc.sim.setup import SimSetup, TaskSetup


@dataclass(slots=True)
class _Group:
    task: str
    remaining: int
    min_version: int | None = None
    tokens: float = 0.0
    doomed: bool = False


@dataclass(slots=True)
class _TaskStreams:
    setup: TaskSetup
    first_prompt: Callable[[], float]
    prompt: Callable[[], float]
    response: Callable[[], float]
    turns: Callable[[], float]
    env_latency: Callable[[], float]
    reward_latency: Callable[[], float]


@dataclass
class _Counters:
    trajectories_finished: int = 0
    groups_dropped: int = 0
    trajectories_trained: int = 0
    tokens_trained: float = 0.0
    staleness_sum: float = 0.0
    train_busy_s: float = 0.0
    step_ends: list[float] = field(default_factory=list)
    trained_by_task: dict[str, int] = field(default_factory=dict)
    generated_by_task_pool: dict[str, float] = field(default_factory=dict)


class Simulation:
    def __init__(self, setup: SimSetup, record_timeline: bool = False):
        self.setup = setup
        self.env = simpy.Environment()
        self.rng = random.Random(setup.seed)
        seeds = np.random.SeedSequence(setup.seed).spawn(len(setup.tasks))
        self.streams: dict[str, _TaskStreams] = {}
        for task, seed in zip(setup.tasks, seeds, strict=True):
            gen = np.random.default_rng(seed)
            self.streams[task.name] = _TaskStreams(
                task,
                sampler(task.first_prompt, gen, integer=True),
                sampler(task.prompt, gen, integer=True),
                sampler(task.response, gen, integer=True),
                sampler(task.turns, gen, integer=True),
                sampler(task.env_latency, gen),
                sampler(task.reward_latency, gen),
            )
        self.engines = {
            pool.name: [SimEngine(self.env, pool.cost, f"{pool.name}-{i}") for i in range(pool.engines)]
            for pool in setup.rollout
        }
        self.engine_pool = {engine.name: pool for pool, engines in self.engines.items() for engine in engines}
        self._all_engines = [engine for engines in self.engines.values() for engine in engines]
        self.env_servers = FifoServers(self.env, setup.env_slots, "env")
        self.reward: FifoServers | ServerlessPool
        if setup.reward.mode == "dedicated":
            self.reward = FifoServers(self.env, max(setup.reward.replicas, 1), "reward")
        else:
            r = setup.reward
            self.reward = ServerlessPool(self.env, r.cold_start_s, r.keep_alive_s, r.max_instances)
        self.counters = _Counters()
        self.timeline: list[dict[str, Any]] | None = [] if record_timeline else None
        self.engine_version = 0
        self.steps_started = 0
        self.outstanding = {t.name: 0 for t in setup.tasks}
        self.launched = 0
        self.ready: dict[str, deque[_Group]] = {t.name: deque() for t in setup.tasks}
        self.in_flight: set[int] = set()
        self._groups: dict[int, _Group] = {}
        self._ready_signal: simpy.Event | None = None
        self._traj_ids = 0

    # -- launching -----------------------------------------------------------------------------
    def _launch(self) -> None:
        s = self.setup
        rounds = self.engine_version + s.max_staleness + 1 - self.steps_started
        for task in s.tasks:
            streams = self.streams[task.name]
            while self.outstanding[task.name] < rounds * task.groups_per_step:
                group = _Group(task.name, s.group_size)
                gid = self.launched
                self.launched += 1
                self.outstanding[task.name] += 1
                self._groups[gid] = group
                self.in_flight.add(gid)
                for _ in range(s.group_size):
                    self.env.process(self._trajectory(gid, group, streams))

    def _pick_engine(self, pool: str) -> SimEngine:
        engines = self._all_engines if self.setup.routing == "random" else self.engines[pool]
        if len(engines) == 1:
            return engines[0]
        a = engines[self.rng.randrange(len(engines))]
        b = engines[self.rng.randrange(len(engines))]
        return a if a.load <= b.load else b

    # -- one trajectory ------------------------------------------------------------------------
    def _trajectory(self, gid: int, group: _Group, s: _TaskStreams) -> Generator[simpy.Event, Any, None]:
        env = self.env
        engine = self._pick_engine(s.setup.rollout_pool)
        route = f"{s.setup.name}@{self.engine_pool[engine.name]}"
        routed = self.counters.generated_by_task_pool
        turns = int(s.turns())
        context = 0.0
        self._traj_ids += 1
        traj = f"{s.setup.name}-{self._traj_ids}"
        for turn in range(turns):
            prompt = s.first_prompt() if turn == 0 else s.prompt()
            response = s.response()
            t0 = env.now
            version, batch = yield engine.submit(prompt, context, response)
            if turn == 0 and (group.min_version is None or version < group.min_version):
                group.min_version = version
            if self.timeline is not None:
                self._span(
                    engine.name,
                    "rollout",
                    "generate",
                    t0,
                    env.now,
                    s.setup.name,
                    traj,
                    prompt_tokens=prompt + context,
                    new_tokens=response,
                    cached_tokens=context,
                    batch=batch,
                    version=version,
                )
            context += prompt + response
            routed[route] = routed.get(route, 0.0) + response
            latency = s.env_latency()
            if latency > 0.0:
                t0 = env.now
                yield self.env_servers.request(latency)
                if self.timeline is not None:
                    self._span("env", "env", "env_step", t0, env.now, s.setup.name, traj)
        t0 = env.now
        if s.setup.reward_service is not None:
            yield self.reward.request(s.setup.reward_service.time(context))
        latency = s.reward_latency()
        if latency > 0.0:
            yield env.timeout(latency)
        if self.timeline is not None and env.now > t0:
            self._span("reward", "reward", "reward", t0, env.now, s.setup.name, traj)
        self.counters.trajectories_finished += 1
        group.tokens += context
        group.remaining -= 1
        if group.remaining == 0:
            self._group_done(gid, group)

    def _group_done(self, gid: int, group: _Group) -> None:
        self.in_flight.discard(gid)
        del self._groups[gid]
        if group.doomed:
            return  # already counted as dropped and no longer outstanding
        self.ready[group.task].append(group)
        if self._ready_signal is not None and not self._ready_signal.triggered:
            self._ready_signal.succeed()

    # -- trainer -------------------------------------------------------------------------------
    def _collect(self) -> Generator[simpy.Event, Any, list[_Group]]:
        """Wait until every task has its share of usable groups (the task mix of a step is fixed, so
        slow tasks are not crowded out by fast ones); drop the stale groups met on the way."""
        s = self.setup
        while True:
            floor = self.steps_started - s.max_staleness
            dropped = False
            complete = True
            for task in s.tasks:
                ready = self.ready[task.name]
                stale = sum(1 for g in ready if g.min_version is not None and g.min_version < floor)
                if stale:
                    self.ready[task.name] = ready = deque(
                        g for g in ready if g.min_version is None or g.min_version >= floor
                    )
                    self.counters.groups_dropped += stale
                    self.outstanding[task.name] -= stale
                    dropped = True
                complete = complete and len(ready) >= task.groups_per_step
            if complete:
                batch: list[_Group] = []
                for task in s.tasks:
                    ready = self.ready[task.name]
                    batch += [ready.popleft() for _ in range(task.groups_per_step)]
                    self.outstanding[task.name] -= task.groups_per_step
                return batch
            if dropped:
                self._launch()
            self._ready_signal = self.env.event()
            yield self._ready_signal
            self._ready_signal = None

    def _doom_stale(self) -> None:
        """Groups in flight that can no longer be used: stop counting them, launch replacements."""
        floor = self.steps_started - self.setup.max_staleness
        for gid in list(self.in_flight):
            group = self._groups[gid]
            if not group.doomed and group.min_version is not None and group.min_version < floor:
                group.doomed = True
                self.in_flight.discard(gid)
                self.counters.groups_dropped += 1
                self.outstanding[group.task] -= 1

    def _trainer(self) -> Generator[simpy.Event, Any, None]:
        s = self.setup
        env = self.env
        for step in range(s.steps):
            batch = yield from self._collect()
            self.steps_started += 1
            self._doom_stale()
            self._launch()
            tokens = sum(g.tokens for g in batch)
            c = self.counters
            c.trajectories_trained += len(batch) * s.group_size
            for g in batch:
                c.trained_by_task[g.task] = c.trained_by_task.get(g.task, 0) + s.group_size
            c.tokens_trained += tokens
            c.staleness_sum += sum(step - g.min_version for g in batch if g.min_version is not None)
            if s.colocated and s.switch_s:
                yield env.timeout(s.switch_s)
            t0 = env.now
            duration = s.train.time(tokens)
            c.train_busy_s += duration
            yield env.timeout(duration)
            if self.timeline is not None:
                self._span("train", "train", "train", t0, env.now, None, None, tokens=tokens, step=step)
            version = step + 1
            if s.max_staleness == 0:
                yield env.timeout(s.sync_s + (s.switch_s if s.colocated else 0.0))
                self._deliver(version)
            elif step == s.steps - 1:
                yield env.timeout(s.sync_s)
                self._deliver(version)
            else:

                def deliver(_event: simpy.Event, v: int = version) -> None:
                    self._deliver(v)

                env.timeout(s.sync_s).callbacks.append(deliver)
            c.step_ends.append(env.now)

    def _deliver(self, version: int) -> None:
        if self.timeline is not None and self.setup.sync_s > 0:
            self._span(
                "sync", "sync", "sync", self.env.now - self.setup.sync_s, self.env.now, None, None, step=version - 1
            )
        for engines in self.engines.values():
            for engine in engines:
                engine.swap_weights(version, self.setup.swap_s)
        self.engine_version = version
        self._launch()

    def _span(
        self, worker: str, role: str, kind: str, t0: float, t1: float, task: str | None, traj: str | None, **extra: Any
    ) -> None:
        assert self.timeline is not None
        span = {
            "worker": worker,
            "role": role,
            "kind": kind,
            "t0": t0,
            "t1": t1,
            "step": self.steps_started,
            "task": task,
            "traj": traj,
        }
        span.update(extra)
        self.timeline.append(span)

    # -- running -------------------------------------------------------------------------------
    def run(self) -> SimResult:
        start = time.perf_counter()
        self._launch()
        trainer = self.env.process(self._trainer())
        step = self.env.step
        events = 0
        try:
            while not trainer.triggered:
                step()
                events += 1
        except simpy.core.EmptySchedule:
            raise RuntimeError(
                f"simulation {self.setup.name!r} stalled at t={self.env.now:.1f}s after {len(self.counters.step_ends)} steps: "
                f"nothing left to happen (outstanding groups {self.outstanding}, ready { ({k: len(v) for k, v in self.ready.items()}) })"
            ) from None
        if not trainer.ok:
            assert isinstance(trainer.value, BaseException)  # a failed simpy process holds its exception
            raise trainer.value
        return self._result(events, time.perf_counter() - start)

    def _result(self, events: int, wall_s: float) -> SimResult:
        s = self.setup
        c = self.counters
        total = self.env.now
        pools = {name: PoolReport(name, p.kind, p.count) for name, p in s.pools.items()}
        for pool, engines in self.engines.items():
            report = pools[pool]
            for engine in engines:
                report.busy_device_s += engine.busy_s * engine.cost.devices
                peak = engine.cost.peak_flops()
                report.add_flops(
                    engine.cost.flops(engine.decoded_tokens + engine.prefilled_tokens),
                    None if peak is None else peak / engine.cost.devices,
                )
        train = pools[s.train_pool]
        train.busy_device_s += c.train_busy_s * s.train.devices
        peak = s.train.peak_flops()
        train.add_flops(s.train.flops(c.tokens_trained), None if peak is None else peak / s.train.devices)
        pools[s.env_pool].busy_device_s += self.env_servers.busy_s / max(s.env_slots, 1) * pools[s.env_pool].count
        if isinstance(self.reward, FifoServers) and s.reward.replicas:
            pools[s.reward.pool].busy_device_s += self.reward.busy_s
        for report in pools.values():
            report.finish(total)
        reserved_usd = s.price_per_hour * total / 3600.0
        if isinstance(self.reward, ServerlessPool):
            billed = self.reward.billed_seconds(total)
            serverless_usd = billed * s.reward.instance_price_per_hour / 3600.0
            reward = {
                "mode": "serverless",
                "requests": self.reward.served,
                "cold_starts": self.reward.cold_starts,
                "peak_instances": self.reward.peak_instances,
                "instance_seconds": billed,
                "busy_s": self.reward.busy_s,
            }
        else:
            serverless_usd = 0.0
            reward = {
                "mode": "dedicated",
                "requests": self.reward.served,
                "replicas": s.reward.replicas,
                "busy_s": self.reward.busy_s,
            }
        ends = c.step_ends
        steady = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else total
        generated = sum(e.decoded_tokens for engines in self.engines.values() for e in engines)
        return SimResult(
            name=s.name,
            mode=s.mode,
            placement="colocated" if s.colocated else "disaggregated",
            steps=s.steps,
            total_time_s=total,
            step_time_s=total / s.steps,
            steady_step_time_s=steady,
            trajectories=c.trajectories_trained,
            trajectories_finished=c.trajectories_finished,
            trajectories_per_s=c.trajectories_trained / total,
            tokens_per_s=c.tokens_trained / total,
            generated_tokens=generated,
            dropped_groups=c.groups_dropped,
            trained_by_task=dict(sorted(c.trained_by_task.items())),
            routing=s.routing,
            generated_by_task_pool=dict(sorted(c.generated_by_task_pool.items())),
            mean_staleness=c.staleness_sum / max(s.steps * s.groups_per_step, 1),
            pools=pools,
            reward=reward,
            price_per_hour=s.price_per_hour,
            reserved_usd=reserved_usd,
            serverless_usd=serverless_usd,
            events=events,
            wall_s=wall_s,
            step_ends=list(ends),
            timeline=self.timeline,
        )


def simulate(setup: SimSetup, record_timeline: bool = False) -> SimResult:
    return Simulation(setup, record_timeline).run()
