"""Dynamic sampling in the scheduling core: groups with all-equal rewards are dropped and replaced, up to a cap."""

import pytest

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.replay import GroupDone, InProcessDriver, TrainerFree, WeightsPublished, replay
from rollarc.policy.scheduler import DynamicSampling, GroupScheduler, NoSignalError


def core(k: int = 0, cap: int = 2, when: str = "train") -> GroupScheduler:
    return GroupScheduler(2, k, {"t": 1.0}, dynamic_sampling=DynamicSampling(cap, when))  # type: ignore[arg-type]


def test_a_group_without_signal_is_dropped_and_admission_starts_another_in_its_place():
    s = core()
    assert [a.group for a in s.admit_all()] == [0, 1]  # sync: B = 2 groups for version 0
    assert s.complete(0, 0, signal=False) is False
    assert [a.group for a in s.admit_all()] == [2]  # its place is free again
    assert s.complete(1, 0) is True and s.complete(2, 0) is True
    batch = s.take_batch().batch
    assert batch is not None and [g.group for g in batch.groups] == [1, 2]
    assert (s.counts.dropped_no_signal, s.counts.trained, s.counts.dropped_by_task["t"]) == (1, 2, 1)


def test_past_the_cap_groups_without_signal_are_trained_and_the_cap_starts_again_after_a_batch():
    s = core(cap=2)
    s.admit_all()
    assert s.complete(0, 0, signal=False) is False
    assert [a.group for a in s.admit_all()] == [2]
    assert s.complete(1, 0, signal=False) is False  # 2 drops: the cap
    assert [a.group for a in s.admit_all()] == [3]
    assert s.complete(2, 0, signal=False) is True  # kept: trained with zero advantage
    assert s.complete(3, 0) is True
    batch = s.take_batch().batch
    assert [g.group for g in batch.groups] == [2, 3]
    assert (s.counts.dropped_no_signal, s.counts.kept_no_signal) == (2, 1)
    s.publish(1)
    s.admit_all()
    assert s.complete(4, 1, signal=False) is False  # a new step: dropping again
    assert s.counts.dropped_no_signal == 3


def test_stop_raises_one_message_naming_the_group_and_task():
    s = core(cap=1, when="stop")
    s.admit_all()
    s.complete(0, 0, signal=False)
    s.admit_all()
    with pytest.raises(
        NoSignalError, match=r"^1 groups had all-equal rewards since the last batch .* group 1 of task 't'"
    ):
        s.complete(1, 0, signal=False)


def test_without_dynamic_sampling_signal_is_ignored():
    s = GroupScheduler(2, 0, {"t": 1.0})
    s.admit_all()
    assert s.complete(0, 0, signal=False) is True and s.counts.dropped_no_signal == 0


def test_async_replacements_respect_the_staleness_bound():
    # k = 1, B = 2: at most (k + 1) B = 4 groups outstanding; a drop frees one place, no more
    s = core(k=1, cap=10)
    assert len(s.admit_all()) == 4
    s.complete(0, 0, signal=False)
    assert [a.group for a in s.admit_all()] == [4]
    assert s.admit_all() == []


def test_replayed_events_give_the_same_batches_through_the_in_process_driver_and_the_core():
    events = [
        GroupDone(0, 0, 0, signal=False),
        GroupDone(1, 0, 0),
        GroupDone(2, 0, 0, signal=False),
        GroupDone(3, 0, 0),
        TrainerFree(),
        WeightsPublished(1),
    ]
    decisions = replay(InProcessDriver(core(cap=5), Dispatcher({"t": None})), events)
    assert [a.group for a in decisions.admissions] == [0, 1, 2, 3, 4, 5]
    assert [[g.group for g in b.groups] for b in decisions.batches] == [[1, 3]]
