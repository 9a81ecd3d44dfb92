"""The step cycle (rollarc.policy.step_plan): the actions a driver is told to take, checked by hand.

Each test scripts the events a driver would report (groups finishing, the step trained, its weights
published and synced, a lost trainer) and compares every :meth:`StepPlan.schedule` answer with the
actions worked out by hand from the admission rule ``next_train + outstanding // B - published <= k``
(and ``< train.steps``), admission-order batches and the cadence.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rollarc.policy.scheduler import Admission, Batch, GroupScheduler, ReadyGroup
from rollarc.policy.step_plan import (
    Action,
    Cadence,
    CancelInFlight,
    Checkpoint,
    DropStale,
    Evaluate,
    Finish,
    Launch,
    Resize,
    StepDone,
    StepPlan,
    Sync,
    Train,
)


def plan_of(b: int, k: int, steps: int, cadence: Cadence | None = None, **kw) -> StepPlan:
    return StepPlan(GroupScheduler(b, k, {"t": 1.0}, total_steps=steps, **kw), cadence)


def launch(*groups: int, restart: bool = False) -> Launch:
    return Launch(tuple(Admission(g, "t", restart=restart) for g in groups))


def ready(group: int, oldest: int, newest: int | None = None) -> ReadyGroup:
    return ReadyGroup(group, "t", oldest, oldest if newest is None else newest)


def end(version: int) -> list[Action]:
    return [CancelInFlight(), Evaluate(version, "after_rl"), Checkpoint(version, final=True), Finish(version)]


def finish_step(plan: StepPlan) -> list[Action]:
    """The step in flight trains and publishes; returns the Sync it is told to do (and any launch), then syncs."""
    plan.trained()
    plan.published()
    sync = plan.schedule()
    plan.synced()
    return sync


def drive(plan: StepPlan, versions: Callable[[int, int], tuple[int, int]] | None = None) -> list[list[Action]]:
    """Run ``plan`` to its end as a driver with instant groups: each launched group finishes at once, with tokens of
    ``versions(group, published_version)`` (default: all of the published version). Returns every answer."""
    answers = [plan.start()]
    while not plan.done:
        actions = plan.schedule()
        answers.append(actions)
        for action in actions:
            match action:
                case Launch():
                    for admission in action.admissions:
                        oldest, newest = (versions or (lambda g, v: (v, v)))(admission.group, plan.version)
                        plan.scheduler.complete(admission.group, oldest, newest)
                case Train():
                    plan.trained()
                    plan.published()
                case Sync():
                    plan.synced()
    return answers


def test_sync_mode_admits_b_groups_trains_them_syncs_then_the_next_b_and_ends_with_evaluation_and_checkpoint():
    plan = plan_of(2, 0, steps=2)
    assert plan.start() == [Evaluate(0, "before_rl")]
    # 0 + n // 2 - 0 <= 0 admits two groups; nothing has finished, so no batch
    assert plan.schedule() == [launch(0, 1)]
    assert plan.schedule() == []
    plan.scheduler.complete(1, 0)
    assert plan.schedule() == []  # one of B = 2 finished
    plan.scheduler.complete(0, 0)
    assert plan.schedule() == [Train(Batch(0, (ready(0, 0), ready(1, 0))))]  # nothing admitted while it trains
    assert plan.phase == "training" and plan.schedule() == []
    plan.trained()
    assert plan.moving_weights and plan.schedule() == []
    plan.published()
    assert plan.schedule() == [Sync(1)]
    assert plan.schedule() == [] and plan.version == 0  # the version moves only once every replica has it
    plan.synced()
    assert plan.version == 1
    # the next two groups start before the step is recorded (no evaluation, checkpoint or resize is due)
    assert plan.schedule() == [launch(2, 3), StepDone(1)]
    assert plan.schedule() == []
    plan.scheduler.complete(2, 1)
    plan.scheduler.complete(3, 1)
    assert plan.schedule() == [Train(Batch(1, (ready(2, 1), ready(3, 1))))]
    assert finish_step(plan) == [Sync(2)]
    # the last version: no early launch (and none admitted: 2 + 0 // 2 is not < 2), then the end
    assert plan.schedule() == [StepDone(2)]
    assert plan.schedule() == end(2)
    assert plan.done and plan.schedule() == []
    assert plan.scheduler.counts.new_groups == 4  # B per step, none for a step that never comes


def test_async_k1_keeps_a_second_group_in_flight_and_stops_admitting_before_the_last_step():
    plan = plan_of(1, 1, steps=3, cadence=Cadence(eval_every=2))
    assert plan.start() == [Evaluate(0, "before_rl")]
    assert plan.schedule() == [launch(0, 1)]  # 0 + 0 - 0 <= 1 and 0 + 1 - 0 <= 1; the third: 2 > 1
    plan.scheduler.complete(0, 0)
    assert plan.schedule() == [Train(Batch(0, (ready(0, 0),)))]  # 1 + 1 - 0 = 2 > 1: none admitted
    plan.scheduler.complete(1, 0)  # finishes while step 0 trains: it waits in the buffer
    assert plan.schedule() == []
    assert finish_step(plan) == [Sync(1)]
    assert plan.schedule() == [launch(2), StepDone(1)]  # 1 + 1 - 1 <= 1; the next would need step 3, which never comes
    assert plan.schedule() == [Train(Batch(1, (ready(1, 0),)))]  # staleness 1 - 0 <= 1: trained
    plan.scheduler.complete(2, 1)
    assert finish_step(plan) == [Sync(2)]
    # version 2 evaluates: the record waits for it, and nothing is admitted before (none could be anyway)
    assert plan.schedule() == [StepDone(2, evaluate=True)]
    assert plan.schedule() == [Train(Batch(2, (ready(2, 1),)))]
    assert finish_step(plan) == [Sync(3)]
    assert plan.schedule() == [StepDone(3)]  # no step evaluation at the last version: the one after RL is it
    assert plan.schedule() == end(3)
    assert plan.scheduler.counts.new_groups == 3


def test_async_k2_passes_over_a_straggler_drops_it_when_stale_admits_its_replacement_and_checkpoints():
    plan = plan_of(1, 2, steps=4, cadence=Cadence(checkpoint_every=2))  # max_overtake 1 (the default)
    assert plan.start() == [Evaluate(0, "before_rl")]
    assert plan.schedule() == [launch(0, 1, 2)]  # (k + 1) · B groups
    plan.scheduler.complete(1, 0)
    # group 0 still runs: the batch passes over it (one group, within max_overtake) and it stays first in line
    assert plan.schedule() == [Train(Batch(0, (ready(1, 0),), overtaken=(0,)))]
    assert finish_step(plan) == [Sync(1)]
    assert plan.schedule() == [launch(3), StepDone(1)]  # 1 + 2 - 1 <= 2 and 1 + 2 < 4
    plan.scheduler.complete(2, 0, 1)
    assert plan.schedule() == [Train(Batch(1, (ready(2, 0, 1),), overtaken=(0,)))]
    assert finish_step(plan) == [Sync(2)]
    # checkpoint_every = 2: after the record, and no launch goes first (none would be admitted: 2 + 2 = 4)
    assert plan.schedule() == [StepDone(2), Checkpoint(2)]
    assert plan.schedule() == []
    plan.scheduler.complete(3, 2)
    assert plan.schedule() == [Train(Batch(2, (ready(3, 2),), overtaken=(0,)))]
    assert finish_step(plan) == [Sync(3)]
    assert plan.schedule() == [StepDone(3)]
    plan.scheduler.complete(0, 0)  # the straggler: its newest token is 3 - 0 > 2 versions old
    assert plan.schedule() == [DropStale(ready(0, 0), restart=False), launch(4)]  # its place: 3 + 0 < 4
    plan.scheduler.complete(4, 3)
    assert plan.schedule() == [Train(Batch(3, (ready(4, 3),)))]
    assert finish_step(plan) == [Sync(4)]
    assert plan.schedule() == [StepDone(4), Checkpoint(4)]
    assert plan.schedule() == end(4)
    assert plan.scheduler.counts.dropped_stale == 1 and plan.scheduler.counts.trained == 4


def test_on_stale_restart_runs_the_group_again_before_any_new_group():
    plan = plan_of(1, 1, steps=3, on_stale="restart")
    plan.start()
    assert plan.schedule() == [launch(0, 1)]
    plan.scheduler.complete(1, 0)
    assert plan.schedule() == [Train(Batch(0, (ready(1, 0),), overtaken=(0,)))]
    finish_step(plan)
    assert plan.schedule() == [launch(2), StepDone(1)]
    plan.scheduler.complete(2, 1)
    assert plan.schedule() == [Train(Batch(1, (ready(2, 1),), overtaken=(0,)))]
    finish_step(plan)
    assert plan.schedule() == [StepDone(2)]  # 2 + 1 = 3: no room
    plan.scheduler.complete(0, 0)  # 2 - 0 > 1: no fresh token
    assert plan.schedule() == [
        DropStale(ready(0, 0), restart=True),
        Launch((Admission(0, "t", restart=True, attempt=1),)),  # the place it freed is its own again
    ]


def test_a_resumed_run_starts_at_its_version_runs_the_unfinished_groups_first_and_evaluates_only_if_it_has_not():
    """Resumed from a checkpoint at version 2 of 4 (k = 1, B = 1): groups 0 and 1 were trained, 2 and 3 were
    started but not trained (the checkpoint lists them), so the next new group is 4."""
    scheduler = GroupScheduler(1, 1, {"t": 1.0}, total_steps=4, start_version=2, next_group=4)
    for group in (2, 3):
        scheduler.requeue(group, "t")
    plan = StepPlan(scheduler, Cadence(eval_every=2, checkpoint_every=2))
    assert plan.version == 2
    assert plan.start(evaluated=True) == []  # its evaluations are restored
    assert plan.schedule() == [launch(2, 3, restart=True)]  # 2 + 0 - 2 <= 1, 2 + 1 - 2 <= 1; 2 + 2 is not < 4
    plan.scheduler.complete(3, 2)
    plan.scheduler.complete(2, 2)
    assert plan.schedule() == [Train(Batch(2, (ready(2, 2),)))]
    assert finish_step(plan) == [Sync(3)]
    assert plan.schedule() == [StepDone(3)]
    assert plan.schedule() == [Train(Batch(3, (ready(3, 2),)))]
    assert finish_step(plan) == [Sync(4)]
    assert plan.schedule() == [StepDone(4), Checkpoint(4)]  # 4 % 2 == 0; no step evaluation at the last version
    assert plan.schedule() == end(4)
    assert plan.scheduler.counts.new_groups == 0

    unevaluated = StepPlan(GroupScheduler(1, 1, {"t": 1.0}, total_steps=4, start_version=2, next_group=4))
    assert unevaluated.start(evaluated=False) == [Evaluate(2, "before_rl")]
    fresh = plan_of(1, 1, steps=4)
    assert fresh.start(evaluated=True) == [Evaluate(0, "before_rl")]  # version 0 is always evaluated first
    done = StepPlan(GroupScheduler(1, 1, {"t": 1.0}, total_steps=4, start_version=4, next_group=4))
    assert done.start(evaluated=True) == [] and done.schedule() == end(4)  # resumed at the end: only the end


def test_a_lost_trainer_sends_the_plan_back_and_the_admitted_groups_run_again_first():
    plan = plan_of(1, 1, steps=3, cadence=Cadence(checkpoint_every=1))
    plan.start()
    assert plan.schedule() == [launch(0, 1)]
    plan.scheduler.complete(0, 0)
    plan.scheduler.complete(1, 0)
    assert plan.schedule() == [Train(Batch(0, (ready(0, 0),)))]
    finish_step(plan)
    assert plan.schedule() == [StepDone(1), Checkpoint(1)]
    assert plan.schedule() == [Train(Batch(1, (ready(1, 0),))), launch(2)]
    # the trainer dies during step 1: back to the checkpoint at version 1; group 2 (running) runs again
    assert plan.trainer_lost(1) == [2]
    assert plan.phase == "idle" and plan.version == 1
    with pytest.raises(ValueError, match=r"trained\(\) in phase 'idle'"):
        plan.trained()  # the lost step reports nothing any more
    # 1 + 0 - 1 <= 1: group 2 again (same index, so its place in line); 1 + 1 - 1 <= 1: a new group 3; 1 + 2 is not < 3
    assert plan.schedule() == [Launch((Admission(2, "t", restart=True), Admission(3, "t")))]


def test_a_trainer_lost_in_the_final_checkpoint_redoes_the_steps_since_the_last_one():
    plan = plan_of(1, 0, steps=2, cadence=Cadence(checkpoint_every=1))
    answers = drive(plan)
    assert answers[-1] == end(2) and plan.done
    assert plan.trainer_lost(1) == []  # the final checkpoint failed: back to version 1
    assert not plan.done
    assert plan.schedule() == [launch(2)]  # one more group for the step from version 1 (groups 0, 1 were trained)
    plan.scheduler.complete(2, 1)
    assert plan.schedule() == [Train(Batch(1, (ready(2, 1),)))]
    finish_step(plan)
    assert plan.schedule() == [StepDone(2), Checkpoint(2)]
    assert plan.schedule() == end(2)


def test_resizes_come_after_the_record_and_hold_the_early_launch_back():
    plan = plan_of(1, 0, steps=3, cadence=Cadence(resize_at=frozenset({1})))
    answers = drive(plan)
    assert answers == [
        [Evaluate(0, "before_rl")],
        [launch(0)],
        [Train(Batch(0, (ready(0, 0),)))],
        [Sync(1)],
        [StepDone(1), Resize(1)],  # the fleet changes with nothing in flight, then the next group starts
        [launch(1)],
        [Train(Batch(1, (ready(1, 1),)))],
        [Sync(2)],
        [launch(2), StepDone(2)],
        [Train(Batch(2, (ready(2, 2),)))],
        [Sync(3)],
        [StepDone(3)],
        end(3),
    ]


def test_without_bookends_there_is_no_evaluation_nor_final_checkpoint():
    plan = plan_of(2, 1, steps=2, cadence=Cadence(bookends=False))
    answers = drive(plan)
    assert answers[0] == [] and answers[-1] == [CancelInFlight(), Finish(2)]
    assert not any(isinstance(a, Evaluate | Checkpoint) for actions in answers for a in actions)


def test_the_buffer_peak_counts_the_finished_groups_waiting_when_a_batch_is_formed():
    plan = plan_of(2, 1, steps=2, cadence=Cadence(bookends=False))
    plan.start()
    assert plan.schedule() == [launch(0, 1, 2, 3)]
    for group in (3, 2, 1):
        plan.scheduler.complete(group, 0)
    assert plan.schedule() == [Train(Batch(0, (ready(1, 0), ready(2, 0)), overtaken=(0,)))]
    assert plan.buffer_peak == 3  # groups 1, 2, 3 were waiting; 1 and 2 went into the batch


def test_events_out_of_order_are_refused_with_one_line():
    plan = plan_of(1, 0, steps=1)
    with pytest.raises(ValueError, match=r"schedule\(\) before start\(\)"):
        plan.schedule()
    plan.start()
    with pytest.raises(ValueError, match=r"^step plan: synced\(\) in phase 'idle', expected 'syncing'$"):
        plan.synced()
    with pytest.raises(ValueError, match="needs a GroupScheduler with total_steps"):
        StepPlan(GroupScheduler(1, 0, {"t": 1.0}))
    with pytest.raises(ValueError, match="must be >= 0"):
        Cadence(eval_every=-1)


@pytest.mark.parametrize("deferred", [False, True])
def test_a_live_evaluation_holds_the_next_groups_back_and_a_deferred_one_does_not(deferred: bool):
    plan = plan_of(1, 0, steps=3, cadence=Cadence(eval_every=1, eval_deferred=deferred))
    answers = drive(plan)
    # a live evaluation uses the rollout workers: the next group starts after it; a deferred one only
    # snapshots the weights, so the next group starts before the step's record, as with no evaluation
    step_1 = [launch(1), StepDone(1, evaluate=True)] if deferred else [StepDone(1, evaluate=True)]
    assert answers[4] == step_1
    assert answers[5] == ([Train(Batch(1, (ready(1, 1),)))] if deferred else [launch(1)])
    assert answers[-1] == end(3)
    done = [a for answer in answers for a in answer if isinstance(a, StepDone)]
    assert done == [StepDone(1, evaluate=True), StepDone(2, evaluate=True), StepDone(3)]  # never at the last
