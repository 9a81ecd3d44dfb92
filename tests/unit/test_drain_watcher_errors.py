"""A failed read of Ray's draining nodes is counted and said once, and the watcher goes on (regression: the
watcher thread died with a traceback on the first GCS error, and no later drain became a notice)."""

from __future__ import annotations

import threading
import time

from ray.exceptions import GetTimeoutError, RpcError

from rollarc.diffusion.drain_watcher import DrainWatcher


class ScriptedGcs:
    """Answers get_draining_nodes from a script: an exception to raise or the draining map to return."""

    def __init__(self, answers: list[object]):
        self.answers = answers

    def get_draining_nodes(self, timeout: float) -> dict[str, int]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, dict)
        return answer


def test_failed_polls_are_counted_said_once_and_the_next_drain_is_still_noticed(capsys):
    noticed: list[tuple[str, float | None]] = []
    watcher = DrainWatcher(lambda: {"w0": "node-a"}, lambda w, s: noticed.append((w, s)), 0.5, threading.Event())
    deadline_ms = int((time.time() + 60) * 1000)
    gcs = ScriptedGcs([RpcError("GCS unavailable"), GetTimeoutError("timed out"), {"node-a": deadline_ms}, {}])
    for _ in range(4):
        watcher.poll_once(gcs)  # type: ignore[arg-type]  # a scripted stand-in for Ray's GcsClient
    assert watcher.poll_errors == 2 and not watcher.failing
    assert [w for w, _ in noticed] == ["w0"] and 55 < (noticed[0][1] or 0) <= 60
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2  # one when the polls start failing, one when they work again
    assert lines[0].startswith("rollarc: spot drain watcher: reading Ray's draining nodes failed (GCS unavailable)")
    assert lines[1] == "rollarc: spot drain watcher: reading Ray's draining nodes works again (2 failed polls)"
