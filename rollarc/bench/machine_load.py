"""Was the machine quiet while a benchmark ran? Measured, not declared.

A benchmark's figures are only comparable with another run's when nothing else used the cores. So every
``rollarc bench NAME`` process starts a sampler process (``python -m rollarc.bench.machine_load``) that
reads the CPU time of every process on the machine (``psutil``) every ``interval_s`` seconds and splits
it into the benchmark's process tree (the benchmark, its Ray cluster, its spawned workers, the sampler
itself) and everything else. A separate process, not a thread: a thread in the driver would take the
GIL from the loop it measures (a synchronous ``bench step`` ran about 10 % slower with one). ``summary()`` gives both as shares of the
machine's cores over the run; ``quiet`` is ``other_cpu_share < QUIET_OTHER_SHARE``. The published JSON
carries it (``machine_load``), and so does the block in ``docs/benchmarks.md``.

What it misses: a process that starts and ends between two samples, and the CPU a process used after its
last sample. Both are small at a 1-second interval. Memory bandwidth and cache contention are not CPU
time and are not seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

QUIET_OTHER_SHARE = 0.10


@dataclass
class LoadMonitor:
    """CPU seconds of the tree below ``root_pid`` and of every other process, summed over samples."""

    root_pid: int = field(default_factory=os.getpid)
    own_cpu_seconds: float = 0.0
    other_cpu_seconds: float = 0.0
    _seen: dict[tuple[int, float], float] = field(default_factory=dict)

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


class SamplerProcess:
    """The sampler in its own process: it writes its totals to ``state`` after every sample."""

    def __init__(self, interval_s: float = 1.0) -> None:
        fd, name = tempfile.mkstemp(prefix="rollarc-load-", suffix=".json")
        os.close(fd)
        self.state = Path(name)
        self.started = time.monotonic()
        cmd = [sys.executable, "-m", "rollarc.bench.machine_load", str(os.getpid()), str(self.state), str(interval_s)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def summary(self) -> dict[str, float | bool] | None:
        """The shares so far; ``None`` if the sampler has written nothing yet."""
        try:
            totals = json.loads(self.state.read_text() or "null")
        except (OSError, json.JSONDecodeError):
            return None
        if totals is None:
            return None
        wall = time.monotonic() - self.started
        return shares(totals["own_cpu_seconds"], totals["other_cpu_seconds"], wall, os.cpu_count() or 1)


def run_sampler(root_pid: int, state: Path, interval_s: float) -> None:
    """The sampler process's loop: sample, write the totals atomically, until the benchmark's process is gone."""
    monitor = LoadMonitor(root_pid=root_pid)
    monitor.sample(count=False)
    tmp = state.with_name(state.name + ".tmp")
    while psutil.pid_exists(root_pid) and os.getppid() == root_pid:
        time.sleep(interval_s)
        monitor.sample()
        totals = {"own_cpu_seconds": monitor.own_cpu_seconds, "other_cpu_seconds": monitor.other_cpu_seconds}
        tmp.write_text(json.dumps(totals))
        tmp.replace(state)
    state.unlink(missing_ok=True)


_ACTIVE: SamplerProcess | None = None


def start() -> SamplerProcess:
    """Start this process's sampler (the ``rollarc bench`` entry point does, before the benchmark runs)."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = SamplerProcess()
    return _ACTIVE


def summary() -> dict[str, float | bool] | None:
    """The running sampler's summary, or ``None`` when none was started (a test calling ``publish``)."""
    return None if _ACTIVE is None else _ACTIVE.summary()


if __name__ == "__main__":
    run_sampler(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
