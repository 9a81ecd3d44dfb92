"""Which rollouts of a redundant group are kept (rollarc.policy.redundancy), by hand and by property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.policy.redundancy import KeepRule, RolloutState, kept_rollouts

R, OK, F = "running", "ok", "failed"


def first_decision(outcomes: list[RolloutState], order: list[int], size: int, rule: KeepRule) -> tuple[list[int], int]:
    """Finish the rollouts in ``order`` with ``outcomes``; the kept set at the first decision, and how many had ended."""
    states: list[RolloutState] = [R] * len(outcomes)
    kept = kept_rollouts(states, size, rule)
    ended = 0
    for index in order:
        if kept is not None:
            break
        states[index] = outcomes[index]
        ended += 1
        kept = kept_rollouts(states, size, rule)
    assert kept is not None, "every rollout ended and no decision was made"
    return kept, ended


# ---- by_index, by hand ----------------------------------------------------------------------------------


def test_by_index_waits_for_a_slow_rollout_below_g_even_when_a_spare_has_finished_well():
    # G = 2, r = 1: rollout 1 is slow (a long episode); the spare finished first but is not needed yet
    assert kept_rollouts([OK, R, OK], 2) is None
    assert kept_rollouts([OK, OK, OK], 2) == [0, 1]
    assert kept_rollouts([OK, OK, R], 2) == [0, 1]  # decided without the spare: it is cancelled


def test_by_index_replaces_a_failed_rollout_with_the_next_spare_waiting_for_it():
    assert kept_rollouts([OK, F, R, R], 2) is None  # spare 2 is still running
    assert kept_rollouts([OK, F, R, OK], 2) is None  # spare 3 is not used while spare 2 may still end well
    assert kept_rollouts([OK, F, OK, R], 2) == [0, 2]
    assert kept_rollouts([OK, F, F, OK], 2) == [0, 3]  # all spares used


def test_by_index_keeps_fewer_than_g_when_too_few_end_well():
    assert kept_rollouts([F, OK, R], 2) is None
    assert kept_rollouts([F, OK, F], 2) == [1]
    assert kept_rollouts([F, F, F], 2) == []


def test_by_index_a_failure_after_the_set_is_decided_changes_nothing():
    assert kept_rollouts([OK, OK, R, R], 2) == [0, 1]
    assert kept_rollouts([OK, OK, F, F], 2) == [0, 1]
    assert kept_rollouts([OK, F, OK, F], 2) == [0, 2]


def test_without_spares_both_rules_keep_every_rollout_that_ended_well():
    for rule in ("by_index", "first_finished"):
        assert kept_rollouts([OK, R, OK], 3, rule) is None
        assert kept_rollouts([OK, F, OK], 3, rule) == [0, 2]
        assert kept_rollouts([OK, OK, OK], 3, rule) == [0, 1, 2]


# ---- first_finished, by hand ---------------------------------------------------------------------------


def test_first_finished_keeps_the_first_g_to_end_well_and_drops_the_slow_one():
    assert kept_rollouts([OK, R, OK], 2, "first_finished") == [0, 2]  # rollout 1 (slow) is cut
    assert kept_rollouts([OK, OK, OK, R], 2, "first_finished") == [0, 1]  # three ended in one pass: lowest two
    assert kept_rollouts([F, OK, R], 2, "first_finished") is None
    assert kept_rollouts([F, OK, F], 2, "first_finished") == [1]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="group size"):
        kept_rollouts([OK], -1)
    with pytest.raises(ValueError, match="keep rule"):
        kept_rollouts([OK], 1, "fastest")  # type: ignore[arg-type]


# ---- properties ----------------------------------------------------------------------------------------


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[RolloutState], list[int], list[int], int]:
    size = draw(st.integers(0, 6))
    spares = draw(st.integers(0, 4))
    outcomes: list[RolloutState] = draw(
        st.lists(st.sampled_from([OK, F]), min_size=size + spares, max_size=size + spares)
    )
    order = draw(st.permutations(range(size + spares)))
    other = draw(st.permutations(range(size + spares)))
    return outcomes, list(order), list(other), size


@settings(max_examples=300, deadline=None)
@given(groups())
def test_by_index_keeps_the_first_g_ok_indices_whatever_the_finishing_order(group):
    outcomes, order, other, size = group
    expected = [i for i, outcome in enumerate(outcomes) if outcome == OK][:size]
    kept, ended = first_decision(outcomes, order, size, "by_index")
    assert kept == expected
    assert first_decision(outcomes, other, size, "by_index")[0] == kept  # another order, the same set
    finished = set(order[:ended])
    assert set(kept) <= finished  # nothing is kept before it has ended
    # the decision waited only as long as needed: every rollout up to the last kept one has ended
    # (when G were found; otherwise every rollout)
    last_needed = (kept[-1] if kept else -1) if len(kept) == size else len(outcomes) - 1
    assert set(range(last_needed + 1)) <= finished


@settings(max_examples=300, deadline=None)
@given(groups())
def test_first_finished_keeps_what_ended_well_first(group):
    outcomes, order, _, size = group
    kept, ended = first_decision(outcomes, order, size, "first_finished")
    ok_so_far = sorted(i for i in order[:ended] if outcomes[i] == OK)
    assert kept == ok_so_far[:size]
    assert len(kept) == min(size, outcomes.count(OK))
