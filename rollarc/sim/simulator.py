"""The discrete-event simulation of a whole RL training run (SimPy).

Orchestration only: every duration comes from the cost objects in the :class:`SimSetup` (which
come from :mod:`rollarc.cluster`), so the simulator holds no cost formula of its own.

Every scheduling decision is the runtime's: :class:`~rollarc.sim.scheduling.SimScheduling` drives the
pure core of :mod:`rollarc.policy` that the Ray controller and router drive too.

- Each trajectory is a SimPy process running the agent loop: generate → env step → generate …,
  then its reward. Each turn is routed as the runtime's Router routes it: sticky to the engine that
  holds the trajectory's prefix, else the least loaded engine of its task's pool (routing
  ``affinity``) or of every pool (routing ``random``, the task-oblivious baseline), with bounded
  stealing when the task's pool is full.
- Groups are launched when the core admits them (the staleness ledger's rule, tasks in weighted
  round-robin by their ``groups_per_step``, none that no remaining step could train). When the trainer
  is free it takes the core's batch: the ``B`` earliest-admitted finished groups, passing over at most
  ``max_overtake`` older running ones; finished groups with no fresh token are dropped and counted.
  ``k = 0`` is exactly synchronous.
- The step cycle is the runtime's too (:class:`~rollarc.policy.step_plan.StepPlan`): the trainer
  takes its next batch only once the previous step's weights are on the engines (train → weight sync
  → next step), and the run ends at ``steps``; with ``k ≥ 1`` rollout goes on meanwhile, and the
  engines only pause for the swap.
- A run's time ends when the last step's weights are on the engines, so in sync mode without
  variance the step time is exactly rollout + reward + train + sync + swap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, assert_never

import numpy as np
import simpy

from rollarc.cluster.distributions import sampler
from rollarc.policy.freshness import staleness
from rollarc.policy.scheduler import Admission, Batch
from rollarc.policy.step_plan import (
    CancelInFlight,
    Checkpoint,
    DropStale,
    Evaluate,
    Finish,
    Launch,
    Resize,
    StepDone,
    Sync,
    Train,
)
from rollarc.sim.engine import SimEngine
from rollarc.sim.result import PoolReport, SimResult
from rollarc.sim.scheduling import SimScheduling, engine_names
from rollarc.sim.serverless import ServerlessPool
from rollarc.sim.servers import FifoServers
from rollarc.sim.setup import SimSetup, TaskSetup


@dataclass(slots=True)
class _Group:
    task: str
    remaining: int
    min_version: int | None = None
    max_version: int = -1
    tokens: float = 0.0


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
        names = engine_names(setup)
        self.engines = {
            pool.name: [SimEngine(self.env, pool.cost, name) for name in names[pool.name]] for pool in setup.rollout
        }
        self.engine_pool = {engine.name: pool for pool, engines in self.engines.items() for engine in engines}
        self.engine_by_name = {engine.name: engine for engines in self.engines.values() for engine in engines}
        self.scheduling = SimScheduling(setup)
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
        self._groups: dict[int, _Group] = {}
        self._ready_signal: simpy.Event | None = None
        self._traj_ids = 0

    # -- launching -----------------------------------------------------------------------------
    def _launch(self, admissions: tuple[Admission, ...]) -> None:
        """Start the groups the scheduling core admitted."""
        s = self.setup
        for admission in admissions:
            group = _Group(admission.task, s.group_size)
            self._groups[admission.group] = group
            streams = self.streams[admission.task]
            for _ in range(s.group_size):
                self.env.process(self._trajectory(admission.group, group, streams))

    # -- one trajectory ------------------------------------------------------------------------
    def _trajectory(self, gid: int, group: _Group, s: _TaskStreams) -> Generator[simpy.Event, Any, None]:
        env = self.env
        routed = self.counters.generated_by_task_pool
        turns = int(s.turns())
        context = 0.0
        self._traj_ids += 1
        traj = f"{s.setup.name}-{self._traj_ids}"
        for turn in range(turns):
            prompt = s.first_prompt() if turn == 0 else s.prompt()
            response = s.response()
            engine = self.engine_by_name[self.scheduling.turn_starts(traj, s.setup.name)]
            t0 = env.now
            version, batch = yield engine.submit(prompt, context, response)
            self.scheduling.turn_ends(traj)
            if group.min_version is None or version < group.min_version:
                group.min_version = version
            if version > group.max_version:
                group.max_version = version
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
            route = f"{s.setup.name}@{self.engine_pool[engine.name]}"
            routed[route] = routed.get(route, 0.0) + response
            latency = s.env_latency()
            if latency > 0.0:
                t0 = env.now
                yield self.env_servers.request(latency)
                if self.timeline is not None:
                    self._span("env", "env", "env_step", t0, env.now, s.setup.name, traj)
        self.scheduling.trajectory_ends(traj)
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
        assert group.min_version is not None  # every trajectory generates at least one turn
        self.scheduling.group_done(gid, group.min_version, group.max_version)
        if self._ready_signal is not None and not self._ready_signal.triggered:
            self._ready_signal.succeed()

    # -- trainer ----------------------------------------------------------------------------------
    def _drain(self) -> Train | Sync | None:
        """Carry out what the step plan decides now; returns what takes the trainer time (a step, or its sync)."""
        work: Train | Sync | None = None
        plan = self.scheduling.plan
        while actions := plan.schedule():
            for action in actions:
                match action:
                    case Launch():
                        self._launch(action.admissions)
                    case DropStale():
                        del self._groups[action.group.group]
                        self.counters.groups_dropped += 1
                    case Train() | Sync():
                        work = action
                    case StepDone():
                        self.counters.step_ends.append(self.env.now)
                    case CancelInFlight() | Finish():
                        pass  # the simulation ends; groups still running are left unfinished
                    case Evaluate() | Checkpoint() | Resize():
                        raise ValueError(f"the simulator has no {type(action).__name__.lower()} to take: {action}")
                    case _:
                        assert_never(action)
        return work

    def _trainer(self) -> Generator[simpy.Event, Any, None]:
        """The trainer: each step the plan asks for, then its sync; waits for finished groups when no batch forms."""
        plan = self.scheduling.plan
        while not plan.done:
            work = self._drain()
            if isinstance(work, Train):
                yield from self._train(work.batch)
            elif isinstance(work, Sync):
                yield self.env.timeout(self.setup.sync_s + self._colocated_switch_s)
                self._deliver(work.version)
            elif not plan.done:
                self._ready_signal = self.env.event()
                yield self._ready_signal
                self._ready_signal = None

    @property
    def _colocated_switch_s(self) -> float:
        """Synchronous colocated steps switch the devices back from training to rollout after the sync."""
        s = self.setup
        return s.switch_s if s.colocated and s.max_staleness == 0 else 0.0

    def _train(self, batch: Batch) -> Generator[simpy.Event, Any, None]:
        s = self.setup
        env = self.env
        version = batch.train_version
        groups = [(staleness(version, g.min_version), self._groups.pop(g.group)) for g in batch.groups]
        tokens = sum(g.tokens for _, g in groups)
        c = self.counters
        c.trajectories_trained += len(groups) * s.group_size
        for _, g in groups:
            c.trained_by_task[g.task] = c.trained_by_task.get(g.task, 0) + s.group_size
        c.tokens_trained += tokens
        c.staleness_sum += sum(age for age, _ in groups)
        if s.colocated and s.switch_s:
            yield env.timeout(s.switch_s)
        t0 = env.now
        duration = s.train.time(tokens)
        c.train_busy_s += duration
        yield env.timeout(duration)
        if self.timeline is not None:
            self._span("train", "train", "train", t0, env.now, None, None, tokens=tokens, step=version)
        self.scheduling.plan.trained()
        self.scheduling.plan.published()  # the sync below carries the weights as soon as they are trained

    def _deliver(self, version: int) -> None:
        if self.timeline is not None and self.setup.sync_s > 0:
            self._span(
                "sync", "sync", "sync", self.env.now - self.setup.sync_s, self.env.now, None, None, step=version - 1
            )
        for engines in self.engines.values():
            for engine in engines:
                engine.swap_weights(version, self.setup.swap_s)
        self.engine_version = version
        self.scheduling.plan.synced()

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
            "step": self.scheduling.core.next_train_version,
            "task": task,
            "traj": traj,
        }
        span.update(extra)
        self.timeline.append(span)

    # -- running -------------------------------------------------------------------------------
    def run(self) -> SimResult:
        start = time.perf_counter()
        self.scheduling.plan.start()  # no evaluation in a simulation
        self._drain()  # the first groups start before the trainer does
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
                f"nothing left to happen (in flight {len(self.scheduling.core.in_flight)} groups, finished "
                f"{len(self.scheduling.core.ready)})"
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
            dropped_by_task=dict(sorted(self.scheduling.core.counts.dropped_by_task.items())),
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
