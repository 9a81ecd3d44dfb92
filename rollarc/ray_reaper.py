"""Reap the processes of a local Ray session that rollarc started: after ``ray.shutdown``, or when the driver dies.

``ray.shutdown`` asks the session's daemons to exit but does not wait; and when the driver is killed
(SIGKILL, OOM), nothing in it runs, so the raylet, the dashboard and runtime-env agents and idle
workers stayed up, listening, for minutes. So rollarc starts this module as a small watcher process
next to each local cluster: it waits for the driver's process to end, then terminates every process
of that session (found by the session directory's name in its command line, with their children),
and kills what is still alive after a grace period. The driver calls :func:`reap` itself after a
normal shutdown, and stops the watcher.

Usage (internal): ``python -m rollarc.ray_reaper DRIVER_PID DRIVER_CREATE_TIME SESSION_DIR``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

GRACE_S = 5.0
POLL_S = 1.0


def session_processes(session_dir: str | Path) -> list[psutil.Process]:
    """The session's processes (daemons, agents, workers), never this process nor its parents."""
    name = Path(session_dir).name
    exclude = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid not in exclude and any(name in part for part in proc.info["cmdline"] or []):
                found[proc.pid] = proc
                found.update({c.pid: c for c in proc.children(recursive=True) if c.pid not in exclude})
        except psutil.Error:
            continue
    return list(found.values())


def reap(session_dir: str | Path, grace_s: float = GRACE_S) -> list[int]:
    """Terminate the session's processes, kill those alive after ``grace_s``; returns the pids found."""
    procs = session_processes(session_dir)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=grace_s)
    return [p.pid for p in procs]


def start_watcher(session_dir: str) -> subprocess.Popen[bytes]:
    """A process that reaps the session once this (driver) process is gone, however it ends."""
    me = psutil.Process()
    return subprocess.Popen(
        [sys.executable, "-m", "rollarc.ray_reaper", str(me.pid), repr(me.create_time()), session_dir],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the driver's process group does not take the watcher too
    )


def _driver_alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == create_time and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main(argv: list[str]) -> int:
    pid, create_time, session_dir = int(argv[0]), float(argv[1]), argv[2]
    while _driver_alive(pid, create_time):
        time.sleep(POLL_S)
    reap(session_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
