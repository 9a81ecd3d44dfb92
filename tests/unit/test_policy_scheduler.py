"""The scheduling core (rollarc.policy.scheduler): admission, freshness, batches, stale groups, k=0 as sync.

Hand-worked sequences first, then property tests with random completion orders and version bumps.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.policy.freshness import is_fresh, max_in_flight_groups, staleness, steps_spanned
from rollarc.policy.scheduler import Admission, GroupScheduler, ReadyGroup


def one_task(b: int, k: int, **kw) -> GroupScheduler:
    return GroupScheduler(b, k, {"t": 1.0}, **kw)


def test_the_freshness_rule():
    assert staleness(train_version=5, version=3) == 2
    assert is_fresh(5, 3, max_staleness=2) and not is_fresh(5, 2, max_staleness=2)
    assert is_fresh(0, 0, max_staleness=0) and not is_fresh(1, 0, max_staleness=0)
    assert max_in_flight_groups(4, 2) == 12 and steps_spanned(0) == 1 and steps_spanned(3) == 4


def test_sync_admits_exactly_b_groups_per_published_version():
    core = one_task(4, 0)
    assert [a.group for a in core.admit_all()] == [0, 1, 2, 3]
    for g in range(4):
        core.complete(g, 0)
    decision = core.take_batch()
    assert decision.batch is not None and decision.batch.train_version == 0
    assert core.admit() is None  # step 0 trains: nothing starts on the old weights
    core.publish(1)
    assert [a.group for a in core.admit_all()] == [4, 5, 6, 7]


def test_admission_at_the_bound_k1_fills_two_rounds_ahead_then_waits():
    core = one_task(2, 1)
    # next_train 0 + outstanding // 2 - published 0 <= 1 admits while outstanding <= 3: four groups.
    assert len(core.admit_all()) == 4 and core.outstanding == 4 and not core.can_admit()
    core.complete(0, 0)
    core.complete(1, 0)
    assert core.take_batch().batch is not None  # step 0 starts; groups 2, 3 (version 0) wait for step 1
    assert core.admit() is None  # 1 + 2 // 2 - 0 = 2 > 1
    core.publish(1)
    assert [a.group for a in core.admit_all()] == [4, 5]  # 1 + 3 // 2 - 1 = 1 admits the 4th outstanding
    assert core.outstanding == 4 and core.max_in_flight == 4


def test_k0_barrier_trains_the_synchronous_batches_in_any_finish_order():
    core = one_task(3, 0)
    rng = random.Random(0)
    for step in range(4):
        admitted = core.admit_all()
        assert [a.group for a in admitted] == [3 * step, 3 * step + 1, 3 * step + 2]
        rng.shuffle(admitted)
        for a in admitted[:-1]:
            core.complete(a.group, step)
            assert core.take_batch().batch is None  # the barrier: never a batch from fewer than B groups
        core.complete(admitted[-1].group, step)
        batch = core.take_batch().batch
        assert batch is not None and batch.train_version == step
        assert sorted(g.group for g in batch.groups) == [3 * step, 3 * step + 1, 3 * step + 2]
        core.publish(step + 1)


def test_batch_is_the_b_earliest_admitted_and_groups_without_a_fresh_token_are_dropped_and_counted():
    core = GroupScheduler(2, 1, {"a": 1.0, "b": 1.0})
    core.next_train_version = core.published_version = 3  # as after three steps
    admitted = core.admit_all()
    assert [(a.group, a.task) for a in admitted] == [(0, "a"), (1, "b"), (2, "a"), (3, "b")]
    core.complete(0, 0, 3)  # began long ago, ended fresh: trained (its old tokens are masked by the trainer)
    core.complete(1, 1, 1)  # nothing within k = 1 of step 3: dropped
    core.complete(2, 2)
    core.complete(3, 0, 1)
    decision = core.take_batch()
    assert decision.stale == (ReadyGroup(1, "b", 1, 1), ReadyGroup(3, "b", 0, 1)) and decision.restarted == ()
    assert decision.batch is not None and [g.group for g in decision.batch.groups] == [0, 2]
    assert core.counts.dropped_stale == 2 and core.counts.dropped_by_task == Counter({"b": 2})
    assert core.counts.trained == 2 and core.outstanding == 0 and core.restart_queue == []


def test_a_finished_group_overtakes_at_most_max_overtake_running_older_ones_which_keep_their_place():
    """Replaces the old completion-order rule (the B first to finish formed the batch: [1, 3] here)."""
    core = one_task(2, 2, max_overtake=1)
    assert len(core.admit_all()) == 6
    for group in (5, 4, 1, 3):
        core.complete(group, 0)
    assert core.take_batch().batch is None  # taking 1 and 3 would pass over two running groups, 0 and 2
    core.complete(2, 0)
    first = core.take_batch().batch
    assert first is not None and [g.group for g in first.groups] == [1, 2] and first.overtaken == (0,)
    second = core.take_batch().batch  # 0 still runs: one straggler is passed over again, no more
    assert second is not None and [g.group for g in second.groups] == [3, 4] and second.overtaken == (0,)
    assert core.take_batch().batch is None  # 5 alone: no partial batch, no split group
    core.publish(1)
    core.admit_all()  # groups 6 and 7
    core.complete(7, 1)
    core.complete(0, 0, 1)
    third = core.take_batch().batch  # the overtaken group comes first once finished; 5 before 7
    assert third is not None and [g.group for g in third.groups] == [0, 5] and third.overtaken == ()
    assert core.counts.overtaken == 2 and list(core.ready) == [7]


def test_max_overtake_zero_is_strict_admission_order():
    core = one_task(2, 1, max_overtake=0)
    core.admit_all()
    for group in (1, 2, 3):
        core.complete(group, 0)
    assert core.take_batch().batch is None  # group 0 runs: nothing may pass it
    core.complete(0, 0)
    batch = core.take_batch().batch
    assert batch is not None and [g.group for g in batch.groups] == [0, 1]


def test_no_group_is_admitted_that_no_remaining_step_can_train():
    core = one_task(2, 2, total_steps=3)
    assert len(core.admit_all()) == 6  # 3 steps × B, within (k + 1) · B
    for group in range(6):
        core.complete(group, 0)
    assert core.take_batch().batch is not None
    core.publish(1)
    assert core.admit_all() == []  # 4 outstanding = 2 remaining steps × B
    short = one_task(2, 2, total_steps=1)
    assert [a.group for a in short.admit_all()] == [0, 1]
    short.fail(0)  # a failed group frees its place: a replacement can still be trained by step 0
    assert [a.group for a in short.admit_all()] == [2]
    short.complete(1, 0)
    short.complete(2, 0)
    assert short.take_batch().batch is not None
    short.publish(1)
    assert short.admit_all() == [] and short.outstanding == 0


def test_stale_restart_runs_again_first_with_a_new_attempt_at_most_max_restarts_times():
    core = one_task(1, 0, on_stale="restart", max_restarts=1)
    assert core.admit_all() == [Admission(0, "t")]
    core.complete(0, 0)
    core.next_train_version = core.published_version = 1  # a step trained meanwhile: version 0 is now stale
    decision = core.take_batch()
    assert decision.batch is None and [g.group for g in decision.stale] == [0] and decision.restarted == (0,)
    assert core.counts.restarted_stale == 1 and core.counts.dropped_stale == 0
    # first in line, same index and task, attempt 1: the driver samples it with fresh seeds
    assert core.admit_all() == [Admission(0, "t", restart=True, attempt=1)]
    core.complete(0, 1)
    core.next_train_version = core.published_version = 2
    decision = core.take_batch()  # stale again: the cap is reached, so it is dropped
    assert decision.restarted == () and core.counts.dropped_stale == 1 and core.restart_queue == []
    assert core.admit_all() == [Admission(1, "t")]  # the next new group; the mix was not advanced by the restart


def test_failed_group_frees_its_slot_and_is_counted():
    core = one_task(2, 0)
    core.admit_all()
    core.fail(0)
    assert core.counts.dropped_failed == 1 and core.counts.dropped_by_task["t"] == 1
    assert [a.group for a in core.admit_all()] == [2]


def test_impossible_bookkeeping_is_refused():
    core = one_task(2, 0)
    with pytest.raises(ValueError, match="not in flight"):
        core.complete(0, 0)
    core.admit_all()
    core.complete(0, 0)
    with pytest.raises(ValueError, match="not in flight"):
        core.fail(0)
    core.publish(2)
    with pytest.raises(ValueError, match="went back"):
        core.publish(1)
    with pytest.raises(ValueError, match="groups_per_step"):
        one_task(0, 0)


def test_task_mix_weights_decide_admissions_and_resume_continues_the_mix():
    core = GroupScheduler(4, 1, {"a": 3.0, "b": 1.0})
    tasks = [a.task for a in core.admit_all()]
    assert Counter(tasks) == {"a": 6, "b": 2}
    resumed = GroupScheduler(4, 1, {"a": 3.0, "b": 1.0}, next_group=5, start_version=2)
    assert [(a.group, a.task) for a in resumed.admit_all()[:3]] == [(5, tasks[5]), (6, tasks[6]), (7, tasks[7])]
    assert resumed.published_version == resumed.next_train_version == 2


events = st.lists(
    st.tuples(st.sampled_from(["finish", "fail", "train", "publish"]), st.integers(0, 10_000)),
    min_size=1,
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(b=st.integers(1, 4), k=st.integers(0, 3), on_stale=st.sampled_from(["drop", "restart"]), script=events)
def test_no_trained_group_ever_breaks_the_bound(b, k, on_stale, script):
    """Random completion orders, failures and version bumps: memory stays bounded, every trained group has a
    token within k."""
    core = GroupScheduler(b, k, {"x": 2.0, "y": 1.0}, on_stale=on_stale)
    admitted_at: dict[int, int] = {}
    training: int | None = None
    trained: set[int] = set()
    for action, pick in script:
        for admission in core.admit_all():
            admitted_at[admission.group] = core.published_version
        assert core.outstanding <= core.max_in_flight
        in_flight = sorted(core.in_flight)
        if action in ("finish", "fail") and in_flight:
            group = in_flight[pick % len(in_flight)]
            if action == "fail":
                core.fail(group)
                continue
            # The oldest token is at least the version published when the group was (re)admitted.
            span = core.published_version - admitted_at[group]
            oldest = admitted_at[group] + (pick // 7) % (span + 1)
            core.complete(group, oldest, oldest + (pick // 11) % (core.published_version - oldest + 1))
        elif action == "train" and training is None:
            decision = core.take_batch()
            for group in decision.stale:
                assert staleness(core.next_train_version - (decision.batch is not None), group.max_version) > k
            if decision.batch is not None:
                assert len(decision.batch.groups) == b
                for group in decision.batch.groups:  # its newest token is fresh (older ones are masked)
                    assert 0 <= decision.batch.train_version - group.max_version <= k
                    assert group.group not in trained
                    trained.add(group.group)
                training = decision.batch.train_version
        elif action == "publish" and training is not None:
            core.publish(training + 1)
            training = None


def test_rewind_after_a_lost_trainer_runs_every_admitted_untrained_group_again_first():
    core = one_task(2, 1)
    assert [a.group for a in core.admit_all()] == [0, 1, 2, 3]  # B(k+1) = 4 in flight
    core.complete(0, 0)
    core.complete(1, 0)
    batch = core.take_batch().batch
    assert batch is not None and [g.group for g in batch.groups] == [0, 1]
    core.publish(1)
    core.complete(2, 0)  # buffered; 3 still running
    assert [a.group for a in core.admit_all()] == [4, 5]
    # the trainer dies before a checkpoint of version 1: training goes back to version 0
    assert core.rewind(0) == [2, 3, 4, 5]
    assert (core.published_version, core.next_train_version, core.outstanding) == (0, 0, 0)
    again = core.admit_all()
    assert again == [Admission(g, "t", restart=True) for g in (2, 3, 4, 5)]  # the bound holds: 4 in flight
    for g in (2, 3):
        core.complete(g, 0)
    batch = core.take_batch().batch
    assert batch is not None and batch.train_version == 0 and [g.group for g in batch.groups] == [2, 3]
    core.publish(1)
    assert [a for a in core.admit_all()] == [Admission(6, "t"), Admission(7, "t")]  # new groups go on from 6
