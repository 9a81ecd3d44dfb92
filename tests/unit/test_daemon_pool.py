"""The env thread pool: results and errors come back through futures, and a stuck thread never blocks exit."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from rollarc.agent.daemon_pool import DaemonThreadPool


def test_results_errors_and_the_thread_bound():
    pool = DaemonThreadPool(2, thread_name_prefix="t")
    release = threading.Event()
    blocked = [pool.submit(release.wait) for _ in range(2)]
    queued = pool.submit(lambda x: x * 2, 21)
    assert len(pool.threads) == 2 and not queued.done()  # the third call waits for a free thread
    release.set()
    assert queued.result(timeout=5) == 42 and all(f.result(timeout=5) for f in blocked)
    failing = pool.submit(int, "x")
    with pytest.raises(ValueError, match="invalid literal"):
        failing.result(timeout=5)
    assert len(pool.threads) == 2 and all(t.daemon for t in pool.threads)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int, "1")


def test_shutdown_cancels_queued_calls():
    pool = DaemonThreadPool(1)
    release = threading.Event()
    running = pool.submit(release.wait)
    queued = pool.submit(int, "1")
    pool.shutdown(cancel_futures=True)
    assert queued.cancelled()
    release.set()
    assert running.result(timeout=5) is True


PROGRAM = """
import sys, time
from rollarc.agent.daemon_pool import DaemonThreadPool
pool = DaemonThreadPool(1)
pool.submit(time.sleep, 3600)
time.sleep(0.2)  # the thread is now stuck in its call
pool.shutdown()
print("result printed")
"""


def test_a_stuck_thread_does_not_keep_the_process_alive():
    """Regression: ThreadPoolExecutor threads are joined at exit, so `rollarc eval` never exited after a hang."""
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "result printed"
