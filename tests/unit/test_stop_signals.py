"""SIGINT and SIGTERM become RunStopped, the CLI turns it into one line and the shell's exit code, and what an
interrupted checkpoint write left behind is cleaned up."""

from __future__ import annotations

import os
import signal

import pytest

from rollarc.cli import _guarded
from rollarc.models.checkpoint import remove_partial_directories
from rollarc.runtime.stop_signals import RunStopped, stop_on_signals


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_raises_run_stopped_with_the_shell_exit_code(signum, code):
    previous = signal.getsignal(signum)
    with pytest.raises(RunStopped) as stopped, stop_on_signals():
        os.kill(os.getpid(), signum)
        signal.sigtimedwait([], 0)  # a no-op that gives the handler a bytecode boundary to run at
    assert stopped.value.exit_code == code and stopped.value.name == signal.Signals(signum).name
    assert signal.getsignal(signum) is previous


def test_a_command_stopped_by_a_signal_prints_one_line_and_exits_128_plus_the_signal(capsys):
    def sft() -> int:
        raise RunStopped(signal.SIGTERM)

    assert _guarded(sft) == 143
    err = capsys.readouterr().err
    assert err == "rollarc: stopped by SIGTERM; nothing was saved (this command saves when it ends)\n"


def test_remove_partial_directories_removes_half_written_and_restores_a_lost_rename(tmp_path):
    (tmp_path / "step_000001").mkdir()
    (tmp_path / ".step_000002.tmp-1a2b3c4d").mkdir()  # interrupted mid-write
    (tmp_path / ".step_000001.old-5e6f7a8b").mkdir()  # interrupted after the new copy was in place
    (tmp_path / ".step_000003.old-9c0d1e2f").mkdir()  # interrupted between the two renames
    (tmp_path / ".step_000003.old-9c0d1e2f" / "state.json").write_text("{}")
    removed = [p.name for p in remove_partial_directories(tmp_path)]
    assert sorted(removed) == [".step_000001.old-5e6f7a8b", ".step_000002.tmp-1a2b3c4d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001", "step_000003"]
    assert (tmp_path / "step_000003" / "state.json").read_text() == "{}"
    assert remove_partial_directories(tmp_path / "missing") == []
