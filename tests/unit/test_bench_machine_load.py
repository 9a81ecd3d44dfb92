"""The load monitor splits CPU time between the benchmark's process tree and everything else."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from rollarc.bench.machine_load import QUIET_OTHER_SHARE, LoadMonitor, SamplerProcess, shares
from rollarc.bench.seed_stats import seed_stats

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\nprint('burnt', flush=True)\n"


def burner() -> subprocess.Popen[str]:
    """A process that burns 0.6 s of CPU, says so, then waits for its stdin to close."""
    code = BURN + "import sys\nsys.stdin.read()\n"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_the_tree_counts_as_own_and_a_stranger_as_other():
    tree, stranger = burner(), burner()  # the stranger is not below tree.pid
    mon = LoadMonitor(root_pid=tree.pid)  # sampled by hand
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


def test_the_sampler_process_counts_this_process_as_own_and_stops_with_it():
    sampler = SamplerProcess(interval_s=0.1)
    try:
        t = time.process_time()
        while time.process_time() - t < 0.5:  # burn CPU in the benchmark's own process
            pass
        deadline = time.monotonic() + 60
        while (s := sampler.summary()) is None or s["own_cpu_share"] == 0.0:
            assert time.monotonic() < deadline, "the sampler wrote nothing"
            time.sleep(0.1)
        assert s["own_cpu_share"] > 0.0 and 0.0 <= s["other_cpu_share"] <= 1.0
    finally:
        sampler.proc.kill()
        sampler.proc.wait()
