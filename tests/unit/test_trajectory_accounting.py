"""Every started trajectory ends as done, dropped, failed, cancelled or retried; the rest is counted as lost."""

from __future__ import annotations

import os
import signal

import pytest

from rollarc.models.checkpoint import clean_partial_checkpoints
from rollarc.runtime.stop_signals import RunStopped, stop_on_signals
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


def test_clean_partial_checkpoints_removes_half_written_and_restores_a_lost_rename(tmp_path):
    (tmp_path / "step_000001").mkdir()
    (tmp_path / ".step_000002.tmp-1a2b3c4d").mkdir()  # interrupted mid-write
    (tmp_path / ".step_000001.old-5e6f7a8b").mkdir()  # interrupted after the new copy was in place
    (tmp_path / ".step_000003.old-9c0d1e2f").mkdir()  # interrupted between the two renames
    (tmp_path / ".step_000003.old-9c0d1e2f" / "state.json").write_text("{}")
    removed = clean_partial_checkpoints(tmp_path)
    assert sorted(removed) == [".step_000001.old-5e6f7a8b", ".step_000002.tmp-1a2b3c4d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001", "step_000003"]
    assert (tmp_path / "step_000003" / "state.json").read_text() == "{}"
    assert clean_partial_checkpoints(tmp_path / "missing") == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_raises_run_stopped_with_the_shell_exit_code(signum, code):
    previous = signal.getsignal(signum)
    with pytest.raises(RunStopped) as stopped, stop_on_signals():
        os.kill(os.getpid(), signum)
        signal.sigtimedwait([], 0)  # a no-op that gives the handler a bytecode boundary to run at
    assert stopped.value.exit_code == code and stopped.value.name == signal.Signals(signum).name
    assert signal.getsignal(signum) is previous
