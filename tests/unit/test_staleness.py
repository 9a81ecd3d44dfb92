"""The staleness bound: admission, freshness, batches, bounded memory, and k=0 as exact synchrony."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.runtime.group_buffer import GroupBuffer
from rollarc.runtime.staleness import StalenessLedger


@dataclass
class FakeGroup:
    order: int
    admitted_at: int
    min_version: int = -1


def test_sync_admits_exactly_b_groups_per_published_version():
    ledger = StalenessLedger(groups_per_step=4, max_staleness=0)
    admitted = 0
    while ledger.can_admit():
        ledger.admit()
        admitted += 1
    assert admitted == 4
    assert ledger.consume(4) == 0
    assert not ledger.can_admit()  # training step 0 runs: nothing starts on the old weights
    ledger.publish(1)
    assert ledger.can_admit()


def test_async_k1_fills_two_rounds_ahead_then_waits():
    ledger = StalenessLedger(groups_per_step=2, max_staleness=1)
    for _ in range(4):
        assert ledger.can_admit()
        ledger.admit()
    assert not ledger.can_admit()
    ledger.consume(2)  # step 0 starts; two groups of version 0 remain in flight for step 1
    assert not ledger.can_admit()
    ledger.publish(1)
    assert ledger.can_admit()
    assert ledger.staleness(min_version=0) == 1 and ledger.is_fresh(0)
    ledger.consume(2)
    assert not ledger.is_fresh(0)  # step 2 would be 2 versions past version 0


def test_ledger_rejects_impossible_bookkeeping():
    ledger = StalenessLedger(groups_per_step=2, max_staleness=0)
    with pytest.raises(ValueError):
        ledger.consume(1)
    with pytest.raises(ValueError):
        ledger.discard()
    ledger.publish(2)
    with pytest.raises(ValueError):
        ledger.publish(1)


def test_buffer_returns_stale_groups_and_takes_oldest_first():
    buffer = GroupBuffer(groups_per_step=2, max_staleness=1)
    for order, version in enumerate([3, 1, 2, 0]):
        buffer.add(FakeGroup(order=order, admitted_at=version, min_version=version))
    decision = buffer.take(train_version=3)
    assert [g.min_version for g in decision.stale] == [1, 0]
    assert [g.min_version for g in decision.batch] == [2, 3]
    assert len(buffer) == 0


def test_buffer_waits_for_enough_fresh_groups():
    buffer = GroupBuffer(groups_per_step=3, max_staleness=0)
    buffer.add(FakeGroup(0, 5, 5))
    buffer.add(FakeGroup(1, 5, 5))
    decision = buffer.take(train_version=5)
    assert decision.batch == [] and decision.stale == [] and len(buffer) == 2


events = st.lists(
    st.tuples(st.sampled_from(["finish", "train", "publish", "drift"]), st.integers(0, 10_000)),
    min_size=1,
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(b=st.integers(1, 4), k=st.integers(0, 3), script=events)
def test_no_trained_token_ever_breaks_the_bound(b, k, script):
    """Random completion orders, version bumps and in-flight updates; every trained group is within k."""
    ledger = StalenessLedger(groups_per_step=b, max_staleness=k)
    buffer = GroupBuffer(b, k)
    in_flight: list[FakeGroup] = []
    order = 0
    training: int | None = None  # version the running step started from
    trainer_version = 0
    for action, pick in script:
        while ledger.can_admit():
            ledger.admit()
            in_flight.append(FakeGroup(order, ledger.published_version))
            order += 1
        assert len(in_flight) + len(buffer) <= ledger.max_in_flight  # bounded memory
        if action == "finish" and in_flight:
            group = in_flight.pop(pick % len(in_flight))
            # The oldest token is at least the version published when the group was admitted.
            span = ledger.published_version - group.admitted_at
            group.min_version = group.admitted_at + (pick // 7) % (span + 1)
            buffer.add(group)
        elif action == "train" and training is None:
            decision = buffer.take(ledger.next_train_version)
            ledger.discard(len(decision.stale))
            for group in decision.stale:
                assert ledger.next_train_version - group.min_version > k
            if decision.batch:
                start = ledger.consume(len(decision.batch))
                assert len(decision.batch) == b
                for group in decision.batch:
                    assert 0 <= start - group.min_version <= k
                training = start
        elif action == "publish" and training is not None:
            trainer_version = training + 1
            ledger.publish(trainer_version)
            training = None


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 5), steps=st.integers(1, 6), seed=st.integers(0, 1000))
def test_k0_with_barrier_trains_exactly_the_synchronous_batches(b, steps, seed):
    """k=0: step s trains exactly the B groups admitted after version s was published, in any finish order."""
    import random

    rng = random.Random(seed)
    ledger = StalenessLedger(groups_per_step=b, max_staleness=0)
    buffer = GroupBuffer(b, 0)
    order = 0
    for step in range(steps):
        admitted = []
        while ledger.can_admit():
            ledger.admit()
            admitted.append(FakeGroup(order, step, step))
            order += 1
        assert [g.order for g in admitted] == list(range(step * b, (step + 1) * b))
        rng.shuffle(admitted)
        for group in admitted:
            buffer.add(group)
        decision = buffer.take(ledger.next_train_version)
        assert decision.stale == []
        assert sorted(g.order for g in decision.batch) == list(range(step * b, (step + 1) * b))
        assert ledger.consume(b) == step
        assert not ledger.can_admit()
        ledger.publish(step + 1)
