"""Integration-test set-up: each module starts its Ray cluster only after the previous one has gone.

Ray waits a fixed 30 s for a new raylet to register. On a 2-core machine, a cluster started while the
previous module's raylet, GCS and workers are still exiting can miss that wait (seen in CI as "The
current node timed out during startup"), so every module first waits for those processes to exit, and for the
cluster's workers and agents too (``ray::…`` processes, Ray's Python daemons), so that they have released their CPU:
a wait for what is there, where a fixed second after every module used to be (about 50 s of a suite run). The
cluster that runs share (``tests/integration/shared_ray.py``) stays up: its daemons, agents and idle workers are not waited
for, the actors of a run that left it are.
"""

from __future__ import annotations

import os

import psutil
import pytest

from tests.integration import shared_ray

RAY_DAEMONS = ("raylet", "gcs_server")
RAY_PACKAGE = f"{os.sep}ray{os.sep}"  # in the command line of Ray's Python daemons (log monitor, dashboard, ...)


def is_ray_process(name: str, cmdline: list[str]) -> bool:
    """A Ray daemon, worker or agent: by its name (``ray::IDLE``, ``ray::Router``) or its program in Ray's package."""
    return name in RAY_DAEMONS or name.startswith("ray::") or any(RAY_PACKAGE in part for part in cmdline[:3])


def ray_processes_of_this_user() -> list[psutil.Process]:
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["name", "uids", "cmdline"]):
        info = proc.info
        mine = info["uids"] is not None and info["uids"].real == uid
        if mine and proc.pid != os.getpid() and is_ray_process(info["name"] or "", info["cmdline"] or []):
            found.append(proc)
    return found


WORKERS_EXIT_S = 2.0  # a Ray process left behind (not by this suite) delays a module this long, no longer


@pytest.fixture(scope="module", autouse=True)
def previous_ray_cluster_gone() -> None:
    staying = shared_ray.staying()
    procs = [p for p in ray_processes_of_this_user() if p.pid not in staying]
    daemons = [p for p in procs if p.info["name"] in RAY_DAEMONS]
    psutil.wait_procs(daemons, timeout=60)
    psutil.wait_procs([p for p in procs if p not in daemons], timeout=WORKERS_EXIT_S)


def pytest_sessionfinish() -> None:
    shared_ray.shutdown()
