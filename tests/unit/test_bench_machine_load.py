"""The load monitor splits CPU time between the benchmark's process tree and everything else."""

from __future__ import annotations

import subprocess
import sys

import psutil

from rollarc.bench.machine_load import QUIET_OTHER_SHARE, LoadMonitor, shares
from rollarc.bench.seed_stats import seed_stats

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\nprint('burnt', flush=True)\n"


def burner() -> subprocess.Popen[str]:
    """A process that burns 0.6 s of CPU, says so, then waits for its stdin to close."""
    code = BURN + "import sys\nsys.stdin.read()\n"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_the_tree_counts_as_own_and_a_stranger_as_other():
    tree, stranger = burner(), burner()  # the stranger is not below tree.pid
    mon = LoadMonitor(interval_s=3600.0, root_pid=tree.pid)  # no thread: sampled by hand
    mon.sample(count=False)
    own_before = sum(t.user + t.system for t in [psutil.Process(tree.pid).cpu_times()])
    for proc in (tree, stranger):
        assert proc.stdout is not None and proc.stdout.readline() == "burnt\n"
    mon.sample()
    for proc in (tree, stranger):
        proc.communicate("")
    assert 0.6 - own_before - 0.05 <= mon.own_cpu_seconds <= 0.8  # the tree's burn after the first sample
    assert mon.other_cpu_seconds >= 0.5  # the stranger's burn, plus whatever else ran


def test_shares_are_of_every_core_over_the_wall_time():
    assert shares(5.0, 0.0, 10.0, 2) == {"other_cpu_share": 0.0, "own_cpu_share": 0.25, "wall_s": 10.0, "quiet": True}
    busy = shares(5.0, 3.0, 10.0, 2)
    assert busy["other_cpu_share"] == 0.15 and busy["quiet"] is False  # 3 s of 20 core-seconds
    assert shares(0.0, 1.9, 10.0, 2)["other_cpu_share"] == 0.095 < QUIET_OTHER_SHARE


def test_seed_stats_median_and_range_skip_missing_seeds():
    s = seed_stats([1.0, None, 3.0, 2.0])
    assert s == {"per_seed": [1.0, None, 3.0, 2.0], "median": 2.0, "min": 1.0, "max": 3.0, "complete": False}
    assert seed_stats([None])["median"] is None
    assert seed_stats([0.5, 1.5])["median"] == 1.0 and seed_stats([0.5, 1.5])["complete"] is True
