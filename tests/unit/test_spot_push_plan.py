"""The push baseline's plan: a round-robin deal up front, one job per slot at a time, a lost job restarted."""

import pytest

from rollarc.spotlight.push_plan import PushPlan


def test_jobs_are_dealt_round_robin_and_run_in_order_per_slot():
    plan = PushPlan([10, 11, 12, 13, 14], slots=2)
    assert {s: list(q) for s, q in plan.lists.items()} == {0: [10, 12, 14], 1: [11, 13]}
    assert (plan.next_for(0), plan.next_for(1)) == (10, 11)
    assert plan.next_for(0) is None  # one job at a time per slot
    plan.complete(1, 11)
    assert plan.next_for(1) == 13
    with pytest.raises(ValueError, match="slot 0 is not running job 12"):
        plan.complete(0, 12)


def test_a_lost_slot_restarts_its_job_and_nobody_else_takes_it():
    plan = PushPlan([0, 1, 2, 3], slots=2)
    plan.next_for(0), plan.next_for(1)
    plan.complete(1, 1)
    plan.next_for(1)  # job 3
    plan.lost(0)  # slot 0's worker vanishes mid-job 0
    assert plan.restarted == 1 and list(plan.lists[0]) == [0, 2]
    plan.complete(1, 3)
    assert plan.next_for(1) is None  # slot 1 is idle, but job 2 is slot 0's
    assert plan.next_for(0) == 0  # the replacement starts job 0 again from step 0
    plan.lost(1)  # an idle slot lost: nothing to restart
    assert plan.restarted == 1
    plan.complete(0, 0), plan.next_for(0), plan.complete(0, 2)
    assert plan.done() and plan.completions == [1, 3, 0, 2]
