"""The session watcher reaps when, and only when, its driver has ended: it reads end-of-file on the driver's pipe.

The regression: the watcher used to compare the driver's start time, which psutil derives from the wall
clock's boot time, so a clock step made it reap a live driver's cluster (the driver then exited 1).
No clock is involved now; these tests hold the pipe open, close it, and kill a driver.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

from rollarc.rayproc.reaper import session_processes, start_watcher, stop_watcher

SETTLE_S = 3.0  # longer than the old watcher's 1 s poll: a wrong reap would have happened by then
DEADLINE_S = 60.0


def fake_session_process(session_dir: str) -> subprocess.Popen[bytes]:
    """A stand-in for a Ray daemon: a process whose command line names the session directory."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", session_dir])


def wait_gone(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.fixture
def watched(tmp_path) -> Iterator[tuple[str, subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """(session dir, a fake daemon of it, a watcher started by this process as driver), given time to settle."""
    session_dir = str(tmp_path / f"session_test_{uuid.uuid4().hex}")
    daemon = fake_session_process(session_dir)
    watcher = start_watcher(session_dir)
    time.sleep(SETTLE_S)
    yield session_dir, daemon, watcher
    for proc in (daemon, watcher):
        if proc.poll() is None:
            proc.kill()


def test_the_watcher_leaves_a_live_drivers_session_alone_and_reaps_it_once_the_pipe_closes(watched):
    session_dir, daemon, watcher = watched
    assert daemon.poll() is None and watcher.poll() is None
    assert {p.pid for p in session_processes(session_dir)} == {daemon.pid, watcher.pid}
    assert watcher.stdin is not None
    watcher.stdin.close()  # what the kernel does when the driver ends, however it ends
    assert wait_gone(daemon)
    assert watcher.wait(timeout=DEADLINE_S) == 0


def test_stopping_the_watcher_does_not_reap_and_closes_the_pipe(watched):
    _, daemon, watcher = watched
    stop_watcher(watcher, timeout_s=10.0)
    assert watcher.returncode == -signal.SIGTERM
    assert watcher.stdin is not None and watcher.stdin.closed
    assert daemon.poll() is None  # a normal stop_ray reaps in the driver; the watcher must not


DRIVER = """
import sys, time
from rollarc.rayproc.reaper import start_watcher
watcher = start_watcher(sys.argv[1])
print(watcher.pid, flush=True)
time.sleep(600)
"""


def watcher_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_driver_gets_its_session_reaped(tmp_path):
    session_dir = str(tmp_path / f"session_test_{uuid.uuid4().hex}")
    daemon = fake_session_process(session_dir)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, session_dir], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        watcher_pid = int(driver.stdout.readline())
        time.sleep(SETTLE_S)
        assert daemon.poll() is None
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=DEADLINE_S)
        assert wait_gone(daemon)
        deadline = time.monotonic() + DEADLINE_S
        while watcher_running(watcher_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not watcher_running(watcher_pid)
    finally:
        for proc in (daemon, driver):
            if proc.poll() is None:
                proc.kill()
