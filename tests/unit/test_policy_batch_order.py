"""Batches follow admission order with bounded overtaking (rollarc.policy.scheduler, docs/async.md#batch-order).

A property test over random completion orders, then a replayed world where the long groups are the
successful ones (as on FrozenLake, where every success takes at least 10 steps and a fall can take 1): the
trained share of every label and task follows the admitted share within ``max_overtake`` groups, through
the in-process, the runtime's and the simulator's drivers alike. Under the old completion-order rule the
same world trains far fewer successes than it admits (checked when the rule was replaced).
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.replay import Event, GroupDone, InProcessDriver, TrainerFree, WeightsPublished, replay
from rollarc.policy.scheduler import Batch, GroupScheduler
from rollarc.policy.task_mix import TaskMix
from rollarc.sim.scenario import load_scenario
from rollarc.sim.scheduling import SimScheduling
from rollarc.sim.setup import build_setup
from rollarc.sim.simulator import Simulation
from tests.unit.test_policy_replay import REPO, equivalent_setup, in_process, runtime_config, runtime_driver

script = st.lists(st.tuples(st.sampled_from(["finish", "train", "publish"]), st.integers(0, 10_000)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 4), k=st.integers(1, 3), overtake=st.integers(0, 3), script=script)
def test_batches_follow_admission_order_within_the_overtaking_bound(b, k, overtake, script):
    core = GroupScheduler(b, k, {"x": 1.0, "y": 2.0}, max_overtake=overtake)
    admitted_at: dict[int, int] = {}
    training: int | None = None
    trained: list[int] = []
    for action, pick in script:
        for admission in core.admit_all():
            admitted_at[admission.group] = core.published_version
        running = sorted(core.in_flight)
        if action == "finish" and running:
            group = running[pick % len(running)]
            core.complete(group, admitted_at[group], core.published_version)
        elif action == "train" and training is None:
            untrained = sorted([*core.in_flight, *core.ready])
            finished = {g for g, r in core.ready.items() if core.next_train_version - r.max_version <= k}
            batch = core.take_batch().batch
            # the B earliest-admitted finished groups, passing over at most max_overtake running ones
            first_b = [g for g in untrained if g in finished][:b]
            passed = [g for g in untrained if g not in finished and first_b and g < first_b[-1]]
            if len(first_b) == b and len(passed) <= overtake:
                assert batch is not None and [g.group for g in batch.groups] == first_b
                assert list(batch.overtaken) == passed
                trained += first_b
                training = batch.train_version
            else:
                assert batch is None
        elif action == "publish" and training is not None:
            core.publish(training + 1)
            training = None
    # over the run: every trained group is among the first (trained + overtaken-still-running) admitted
    assert len(set(trained)) == len(trained)
    for position, group in enumerate(sorted(trained)):
        older_untrained = [g for g in core.order if g < group]
        assert group - position <= len(older_untrained) + core.counts.dropped_stale


# ---- a world whose successes are its long groups --------------------------------------------------------
@dataclass
class World:
    events: list[Event]
    batches: list[Batch]
    admitted: list[int]  # group indices in admission order
    success: dict[int, bool]
    task: dict[int, str]


def long_successes(core: GroupScheduler, dispatcher: Dispatcher, steps: int, seed: int = 0) -> World:
    """Drive ``core`` in simulated time: a success takes 6-10 time units, a failure 0.5-2; a step takes 1.

    The task ``countdown`` succeeds more often, so it is the slow task too. Each GroupDone carries the
    version published when its group started and the one published when it ended.
    """
    rng = random.Random(seed)
    driver = InProcessDriver(core, dispatcher)
    events: list[Event] = []
    heap: list[tuple[float, int, str, int]] = []
    world = World(events, [], [], {}, {})
    started: dict[int, int] = {}
    tick = 0
    now = 0.0

    def launch() -> None:
        nonlocal tick
        for admission in driver.admissions():
            if not admission.restart:
                world.admitted.append(admission.group)
            win = rng.random() < (0.7 if admission.task == "countdown" else 0.3)
            world.success[admission.group], world.task[admission.group] = win, admission.task
            started[admission.group] = core.published_version
            tick += 1
            duration = rng.uniform(6, 10) if win else rng.uniform(0.5, 2)
            heapq.heappush(heap, (now + duration, tick, "done", admission.group))

    def record(event: Event) -> None:
        events.append(event)
        match event:
            case GroupDone(group, oldest, newest):
                driver.group_done(group, oldest, newest)
            case WeightsPublished(version):
                driver.weights_published(version)
            case TrainerFree():
                batch = driver.trainer_free()
                if batch is not None:
                    world.batches.append(batch)
                    heapq.heappush(heap, (now + 1.0, -1, "published", batch.train_version + 1))
        launch()  # as every driver does after every event (rollarc.policy.replay.replay)

    launch()
    training = False
    while len(world.batches) < steps and heap:
        now, _, kind, value = heapq.heappop(heap)
        if kind == "done":
            record(GroupDone(value, started[value], core.published_version))
        else:
            record(WeightsPublished(value))
            training = False
        if not training:
            trained = len(world.batches)
            record(TrainerFree())
            training = len(world.batches) > trained
    return world


def shares_follow_admission(world: World, b: int, bound: int) -> list[str]:
    """Each step: the successes and each task's groups trained so far vs. among the first n·B admitted."""
    problems = []
    trained: list[int] = []
    for n, batch in enumerate(world.batches, start=1):
        trained += [g.group for g in batch.groups]
        prefix = world.admitted[: n * b]
        labels = {"success": {g for g, won in world.success.items() if won}}
        labels |= {task: {g for g, t in world.task.items() if t == task} for task in set(world.task.values())}
        for label, members in labels.items():
            got, want = len(members.intersection(trained)), len(members.intersection(prefix))
            if abs(got - want) > bound:
                problems.append(f"step {n}: {label} trained {got}, admitted {want}")
    return problems


def test_long_successful_groups_are_trained_at_their_admitted_share():
    cfg = runtime_config(2, ["train.steps=30"])
    core, dispatcher = in_process(cfg)
    world = long_successes(core, dispatcher, steps=30)
    assert len(world.batches) == 30
    assert shares_follow_admission(world, cfg.train.groups_per_step, cfg.async_.max_overtake) == []
    admitted = Counter(world.success[g] for g in world.admitted[: 30 * 4])[True]
    trained = sum(world.success[g.group] for batch in world.batches for g in batch.groups)
    assert abs(trained - admitted) <= cfg.async_.max_overtake and admitted >= 30  # a real mix of labels
    assert core.counts.dropped_stale == 0
    # the runtime's and the simulator's drivers take the very same decisions on the recorded events
    setup = equivalent_setup(cfg)
    ours = replay(InProcessDriver(*in_process(cfg)), world.events)
    runtime = replay(runtime_driver(cfg, setup), world.events)
    simulator = replay(SimScheduling(setup), world.events)
    assert ours.batches == world.batches == runtime.batches == simulator.batches
    assert ours.admissions == runtime.admissions == simulator.admissions


def test_the_world_is_long_tailed_enough_to_reorder_completions():
    """The test above can fail: the groups finish far out of admission order, and stragglers are passed over."""
    cfg = runtime_config(2, ["train.steps=30"])
    core, dispatcher = in_process(cfg)
    world = long_successes(core, dispatcher, steps=30)
    done = [e.group for e in world.events if isinstance(e, GroupDone)]
    inversions = sum(1 for i, g in enumerate(done) for h in done[i + 1 : i + 20] if h < g)
    assert inversions > len(done)
    assert core.counts.overtaken > 0
    strict, dispatcher = in_process(runtime_config(2, ["train.steps=30", "async.max_overtake=0"]))
    strict_world = long_successes(strict, dispatcher, steps=30)
    assert shares_follow_admission(strict_world, 4, 0) == [] and strict.counts.overtaken == 0


def test_the_simulated_rollarc_128_trains_each_task_at_its_admitted_share():
    """`rollarc simulate configs/sim/rollarc_128.yaml`: `swe`, slow and long-tailed, a quarter of admissions, got
    1,200 of 10,240 trained trajectories under completion-order batches; now its share within max_overtake groups."""
    setup = build_setup(load_scenario(REPO / "configs/sim/rollarc_128.yaml", ["steps=4"]))
    simulation = Simulation(setup)
    result = simulation.run()
    b, g = setup.groups_per_step, setup.group_size
    mix = TaskMix({t.name: float(t.groups_per_step) for t in setup.tasks if t.groups_per_step > 0})
    admitted = Counter(mix.next() for _ in range(4 * b))  # the first 4·B admitted groups, in order
    core = simulation.scheduling.core
    assert core.counts.dropped_stale == 0 and core.counts.dropped_failed == 0
    for task, groups in admitted.items():
        assert abs(result.trained_by_task[task] - groups * g) <= setup.max_overtake * g, task
    assert admitted["swe"] == b  # a quarter of 4·B
