"""One recorded event sequence, replayed through the runtime's driver, the simulator's and the in-process one.

The runtime's driver is :class:`InProcessDriver` over the objects the runtime builds from a training config
(``RuntimeScheduling(cfg).core``, the Controller's scheduler, and the Router's dispatcher); the simulator's is
:class:`SimScheduling` (what the SimPy Simulation calls), configured from the equivalent SimSetup. Both must make the same decisions: the same admissions, the
same batches, the same route for every turn. No Ray is started.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from rollarc.config import Config, load_train_config
from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.replay import (
    Event,
    GroupDone,
    InProcessDriver,
    TrainerFree,
    TrajectoryEnds,
    TurnEnds,
    TurnStarts,
    WeightsPublished,
    replay,
)
from rollarc.policy.scheduler import GroupScheduler
from rollarc.runtime.scheduling import RuntimeScheduling, dedicated_first, dynamic_sampling, make_dispatcher, task_pools
from rollarc.sim.scheduling import SimScheduling, engine_names
from rollarc.sim.setup import PoolBilling, RolloutPoolSetup, SimSetup
from rollarc.sim.simulator import Simulation
from rollarc.sim.toy import toy_setup

REPO = Path(__file__).resolve().parents[2]
GROUP_SIZE = 2


def runtime_config(k: int, overrides: tuple[str, ...] | list[str] = ("train.steps=1000",)) -> Config:
    """configs/multitask.yaml: tasks frozen_lake (weight 2, pool compute), countdown and guess (1, bandwidth)."""
    return load_train_config(
        REPO / "configs/multitask.yaml",
        [
            "train.groups_per_step=4",
            f"train.group_size={GROUP_SIZE}",
            f"async.max_staleness={k}",
            f"async.mode={'sync' if k == 0 else 'async'}",
            "engine.max_num_seqs=2",
            *overrides,
        ],
    )


def in_process(cfg: Config) -> tuple[GroupScheduler, Dispatcher]:
    """The plain core, configured as the runtime configures it from ``cfg``."""
    core = GroupScheduler(
        cfg.train.groups_per_step,
        cfg.async_.max_staleness,
        {t.name: t.weight for t in cfg.tasks},
        max_overtake=cfg.async_.max_overtake,
        total_steps=cfg.train.steps,
        dynamic_sampling=dynamic_sampling(cfg),
    )
    return core, Dispatcher({t.name: t.rollout_pool for t in cfg.tasks})


def equivalent_setup(cfg: Config) -> SimSetup:
    """The same job in the simulator: each task's groups_per_step is its share of B, one engine per replica."""
    base = toy_setup(groups=1, group_size=GROUP_SIZE, max_staleness=cfg.async_.max_staleness, max_batch=2)
    toy = base.tasks[0]
    weights = {t.name: t.weight for t in cfg.tasks}
    share = cfg.train.groups_per_step / sum(weights.values())
    tasks = [
        replace(toy, name=t.name, rollout_pool=t.rollout_pool or "compute", groups_per_step=round(t.weight * share))
        for t in cfg.tasks
    ]
    cost = base.rollout[0].cost
    rollout = [RolloutPoolSetup("compute", 1, cost), RolloutPoolSetup("bandwidth", 2, cost)]
    pools = {
        **base.pools,
        "compute": PoolBilling("compute", "x", 1, 1.0),
        "bandwidth": PoolBilling("bandwidth", "x", 2, 1.0),
    }
    return replace(
        base,
        tasks=tasks,
        rollout=rollout,
        groups_per_step=cfg.train.groups_per_step,
        pools=pools,
        steps=cfg.train.steps,
        max_overtake=cfg.async_.max_overtake,
        dynamic_sampling=dynamic_sampling(cfg),
    )


def runtime_driver(cfg: Config, setup: SimSetup) -> InProcessDriver:
    """The objects the runtime builds from ``cfg``: the Controller's scheduler and the Router's dispatcher."""
    dispatcher = make_dispatcher(task_pools(cfg), dedicated_first=dedicated_first(cfg))
    for pool, names in engine_names(setup).items():  # the Router is told of each replica by the Workers
        for name in names:
            dispatcher.add_replica(name, pool, cfg.engine.max_num_seqs)
    return InProcessDriver(RuntimeScheduling(cfg).core, dispatcher)


def record_events(
    cfg: Config, setup: SimSetup, seed: int, length: int = 400, no_signal_prob: float = 0.0
) -> list[Event]:
    """A random but consistent history, recorded while driving the plain in-process core."""
    rng = random.Random(seed)
    core, dispatcher = in_process(cfg)
    for pool, names in engine_names(setup).items():
        for name in names:
            dispatcher.add_replica(name, pool, cfg.engine.max_num_seqs)
    driver = InProcessDriver(core, dispatcher)
    events: list[Event] = []
    admitted_at: dict[int, int] = {}
    mid_turn: set[str] = set()
    training: int | None = None

    def apply(event: Event) -> None:
        nonlocal training
        events.append(event)
        match event:
            case GroupDone(group, min_version, max_version, signal):
                driver.group_done(group, min_version, max_version, signal)
            case TrainerFree():
                batch = driver.trainer_free()
                training = batch.train_version if batch is not None else None
            case WeightsPublished(version):
                driver.weights_published(version)
                training = None
            case TurnStarts(traj, task):
                driver.turn_starts(traj, task)
                mid_turn.add(traj)
            case TurnEnds(traj):
                driver.turn_ends(traj)
                mid_turn.discard(traj)
            case TrajectoryEnds(traj):
                driver.trajectory_ends(traj)
        for admission in driver.admissions():
            admitted_at[admission.group] = core.published_version

    for admission in driver.admissions():
        admitted_at[admission.group] = core.published_version
    while len(events) < length:
        action = rng.choice(["turn", "turn", "turn", "done", "train", "publish"])
        groups = sorted(core.in_flight)
        if action == "turn" and groups:
            group = rng.choice(groups)
            traj = f"g{group}-{rng.randrange(GROUP_SIZE)}"
            apply(TurnEnds(traj) if traj in mid_turn else TurnStarts(traj, core.in_flight[group]))
        elif action == "done" and groups:
            group = rng.choice(groups)
            for i in range(GROUP_SIZE):
                if f"g{group}-{i}" in mid_turn:
                    apply(TurnEnds(f"g{group}-{i}"))
                apply(TrajectoryEnds(f"g{group}-{i}"))
            oldest = rng.randint(admitted_at[group], core.published_version)
            signal = rng.random() >= no_signal_prob
            apply(GroupDone(group, oldest, rng.randint(oldest, core.published_version), signal))
        elif action == "train" and training is None:
            apply(TrainerFree())
        elif action == "publish" and training is not None:
            apply(WeightsPublished(training + 1))
    return events


@pytest.mark.parametrize(("k", "seed"), [(0, 4), (2, 5)])
def test_dynamic_sampling_makes_identical_decisions_in_the_runtime_and_the_simulator(k, seed):
    """A third of the groups have no reward signal: each driver drops (and replaces) the same ones."""
    cfg = runtime_config(
        k, ("train.steps=1000", "train.dynamic_sampling.enabled=true", "train.dynamic_sampling.max_drops_per_step=3")
    )
    setup = equivalent_setup(cfg)
    events = record_events(cfg, setup, seed, no_signal_prob=0.35)
    runtime_driven = runtime_driver(cfg, setup)
    runtime = replay(runtime_driven, events)
    simulator = replay(SimScheduling(setup), events)
    assert runtime.admissions == simulator.admissions
    assert runtime.batches == simulator.batches
    counts = runtime_driven.scheduler.counts
    # both outcomes of the rule happened: drops under the cap, and groups kept past it
    assert counts.dropped_no_signal >= 3 and counts.kept_no_signal >= 1 and len(runtime.batches) >= 3


@pytest.mark.parametrize(("k", "seed"), [(0, 0), (1, 1), (1, 2), (2, 3)])
def test_runtime_and_simulator_drivers_make_identical_decisions(k, seed):
    cfg = runtime_config(k)
    setup = equivalent_setup(cfg)
    events = record_events(cfg, setup, seed)
    runtime = replay(runtime_driver(cfg, setup), events)
    simulator = replay(SimScheduling(setup), events)
    assert runtime.admissions == simulator.admissions
    assert runtime.batches == simulator.batches
    assert runtime.routes == simulator.routes
    # The history is rich enough to mean something: several steps, all three tasks, stolen turns.
    assert len(runtime.batches) >= 3
    assert {a.task for a in runtime.admissions} == {"frozen_lake", "countdown", "guess"}
    pools = {name: pool for pool, names in engine_names(setup).items() for name in names}
    task_of = {f"g{a.group}-{i}": a.task for a in runtime.admissions for i in range(GROUP_SIZE)}
    preferred = {t.name: t.rollout_pool for t in cfg.tasks}
    assert any(pools[replica] != preferred[task_of[traj]] for traj, replica in runtime.routes)


def test_the_decisions_differ_when_the_simulator_is_configured_differently():
    """The comparison can fail: a simulator given other task shares admits other tasks."""
    cfg = runtime_config(1)
    setup = equivalent_setup(cfg)
    events = record_events(cfg, setup, seed=1)
    skewed = replace(
        setup, tasks=[replace(t, groups_per_step=t.groups_per_step + i) for i, t in enumerate(setup.tasks)]
    )
    assert replay(SimScheduling(skewed), events).admissions != replay(runtime_driver(cfg, setup), events).admissions


def test_the_simulation_schedules_through_the_core():
    """A whole simulated run: every trained group went through the core's batches, and no group is wasted."""
    simulation = Simulation(toy_setup(steps=3, groups=2, max_staleness=1))
    result = simulation.run()
    core = simulation.scheduling.core
    assert core.counts.trained == 3 * 2 == result.trajectories // 2
    assert core.next_train_version == 3 and core.published_version == 3
    # admission stops at the end: every admitted group was trained, none started for a step that never comes
    assert core.counts.new_groups == 3 * 2 and core.outstanding == 0
