"""Reap the processes of a local Ray session that rollarc started: after ``ray.shutdown``, or when the driver dies.

``ray.shutdown`` asks the session's daemons to exit but does not wait; and when the driver is killed
(SIGKILL, OOM), nothing in it runs, so the raylet, the dashboard and runtime-env agents and idle
workers stayed up, listening, for minutes. So rollarc starts this module as a small watcher process
next to each local cluster: it waits for the driver's process to end, then terminates every process
of that session (found by the session directory's name in its command line, with their children),
and kills what is still alive after a grace period. The driver calls :func:`reap` itself after a
normal shutdown, and stops the watcher.

The watcher learns that the driver has ended from its standard input, a pipe whose only writer is
the driver: the kernel closes it however the driver ends, and the read returns end-of-file. It
used to poll the driver's pid and compare its start time, which psutil derives from the wall
clock's boot time: a step of the clock (a VM restored, the clock set) changed that time, the
watcher took the live driver for dead and reaped its cluster, and the driver exited with status 1
a minute later, without a word under pytest's capture (a CI run of the suite ended so).

Usage (internal): ``python -m rollarc.rayproc.reaper SESSION_DIR``, standard input the driver's pipe.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

GRACE_S = 5.0


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
    """A process that reaps the session once this (driver) process is gone, however it ends.

    The returned process's ``stdin`` is the driver's end of the pipe: keep it open while the cluster
    lives (closing it, or the driver ending, makes the watcher reap). The pipe is not inherited by
    processes the driver starts with exec, so Ray's daemons do not keep the watcher waiting.
    """
    return subprocess.Popen(
        [sys.executable, "-m", "rollarc.rayproc.reaper", session_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the driver's process group does not take the watcher too
    )


def stop_watcher(watcher: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop a watcher without it reaping (the driver has reaped), and close the driver's end of its pipe."""
    watcher.terminate()
    try:
        watcher.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait(timeout=timeout_s)
    if watcher.stdin is not None:
        watcher.stdin.close()


def wait_for_end_of_file(fd: int) -> None:
    """Block until every writer of ``fd`` has closed it (the driver has ended)."""
    while os.read(fd, 4096):
        pass


def main(argv: list[str]) -> int:
    session_dir = argv[0]
    wait_for_end_of_file(sys.stdin.fileno())
    reap(session_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
