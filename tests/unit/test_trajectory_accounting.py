"""Every started trajectory ends as done, dropped, failed, cancelled or retried; the rest is counted as lost."""

from __future__ import annotations

import pytest

from rollarc.runtime.trajectory_accounting import TrajectoryAccount


def test_each_way_a_group_can_end_is_counted():
    account = TrajectoryAccount()
    for key in "abcde":
        account.start(key, 5)  # G = 4, r = 1
    assert account.close("a", done=4, failed=0, cancelled=1) == 0
    assert account.close("b", done=4, failed=1, cancelled=0, dropped=0) == 0
    account.retry("c")  # its EnvWorker died
    account.fail("d")  # run_group raised
    account.cancel("e")  # cancelled at the end of the run
    assert account.as_dict() == {
        "started": 25,
        "done": 8,
        "dropped": 0,
        "failed": 6,
        "cancelled": 6,
        "retried": 5,
        "in_flight": 0,
        "lost": 0,
    }


def test_a_result_that_leaves_trajectories_unaccounted_counts_them_lost():
    account = TrajectoryAccount()
    account.start("a", 5)
    account.start("b", 5)
    # Two finished at once past G = 4: if the surplus one were neither returned nor counted, it would be lost.
    assert account.close("a", done=4, failed=0, cancelled=0) == 1
    assert account.in_flight == 5 and account.lost == 1
    assert account.close("b", done=4, failed=0, cancelled=0, dropped=1) == 0
    assert account.lost == 1 and account.dropped == 1


def test_in_flight_groups_are_not_lost_and_bad_reports_are_refused():
    account = TrajectoryAccount()
    account.start("a", 3)
    assert account.in_flight == 3 and account.lost == 0
    with pytest.raises(ValueError, match="started twice"):
        account.start("a", 3)
    with pytest.raises(ValueError, match="started 3 trajectories but reports 4"):
        account.close("a", done=3, failed=1, cancelled=0)
