"""Was the machine quiet while a benchmark ran? Measured, not declared.

A benchmark's figures are only comparable with another run's when nothing else used the cores. So every
``rollarc bench NAME`` process samples the CPU time of every process on the machine (``psutil``) every
``interval_s`` seconds in a daemon thread, and splits it into its own process tree (the benchmark, its
Ray cluster, its spawned workers) and everything else. ``summary()`` gives both as shares of the
machine's cores over the run; ``quiet`` is ``other_cpu_share < QUIET_OTHER_SHARE``. The published JSON
carries it (``machine_load``), and so does the block in ``docs/benchmarks.md``.

What it misses: a process that starts and ends between two samples, and the CPU a process used after its
last sample. Both are small at a 1-second interval. Memory bandwidth and cache contention are not CPU
time and are not seen.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

QUIET_OTHER_SHARE = 0.10


@dataclass
class LoadMonitor:
    """CPU seconds of this process tree and of every other process, summed over samples."""

    interval_s: float = 1.0
    root_pid: int = field(default_factory=os.getpid)
    own_cpu_seconds: float = 0.0
    other_cpu_seconds: float = 0.0
    _seen: dict[tuple[int, float], float] = field(default_factory=dict)
    _started: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LoadMonitor:
        self._started = time.monotonic()
        self.sample(count=False)
        self._thread = threading.Thread(target=self._loop, name="rollarc-load-monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self, *, count: bool = True) -> None:
        """Add every process's CPU time since its last sample to ``own_cpu_seconds`` or ``other_cpu_seconds``."""
        own = self._own_pids()
        seen: dict[tuple[int, float], float] = {}
        for proc in psutil.process_iter(["pid", "create_time", "cpu_times"]):
            times = proc.info["cpu_times"]
            if times is None:  # vanished or not readable
                continue
            key = (proc.info["pid"], proc.info["create_time"])
            cpu = times.user + times.system
            seen[key] = cpu
            delta = cpu - self._seen.get(key, cpu if not count else 0.0)
            if key[0] in own:
                self.own_cpu_seconds += delta
            else:
                self.other_cpu_seconds += delta
        self._seen = seen

    def _own_pids(self) -> set[int]:
        try:
            root = psutil.Process(self.root_pid)
            return {self.root_pid} | {p.pid for p in root.children(recursive=True)}
        except psutil.NoSuchProcess:
            return {self.root_pid}

    def summary(self) -> dict[str, float | bool]:
        """Shares of the machine's cores over the run so far (0..1), and whether it counts as quiet."""
        self.sample()
        return shares(
            self.own_cpu_seconds, self.other_cpu_seconds, time.monotonic() - self._started, os.cpu_count() or 1
        )

    def stop(self) -> None:
        self._stop.set()


def shares(own_cpu_seconds: float, other_cpu_seconds: float, wall_s: float, cpus: int) -> dict[str, float | bool]:
    """CPU seconds as shares of ``cpus`` cores over ``wall_s``; quiet when others used under the threshold."""
    capacity = max(wall_s, 1e-9) * cpus
    other = other_cpu_seconds / capacity
    return {
        "other_cpu_share": round(other, 3),
        "own_cpu_share": round(own_cpu_seconds / capacity, 3),
        "wall_s": round(wall_s, 1),
        "quiet": other < QUIET_OTHER_SHARE,
    }


_ACTIVE: LoadMonitor | None = None


def start() -> LoadMonitor:
    """Start this process's monitor (the ``rollarc bench`` entry point does, before the benchmark runs)."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = LoadMonitor().start()
    return _ACTIVE


def summary() -> dict[str, float | bool] | None:
    """The running monitor's summary, or ``None`` when no monitor was started (a test calling ``publish``)."""
    return None if _ACTIVE is None else _ACTIVE.summary()
