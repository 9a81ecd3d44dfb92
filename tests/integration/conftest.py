"""Integration-test set-up: each module starts its Ray cluster only after the previous one has gone.

Ray waits a fixed 30 s for a new raylet to register. On a 2-core machine, a cluster started while the
previous module's raylet, GCS and workers are still exiting can miss that wait (seen in CI as "The
current node timed out during startup"), so every module first waits for those processes to exit.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest

RAY_DAEMONS = ("raylet", "gcs_server")


def ray_daemons_of_this_user() -> list[psutil.Process]:
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["name", "uids"]):
        info = proc.info
        if info["name"] in RAY_DAEMONS and info["uids"] is not None and info["uids"].real == uid:
            found.append(proc)
    return found


@pytest.fixture(scope="module", autouse=True)
def previous_ray_cluster_gone() -> None:
    psutil.wait_procs(ray_daemons_of_this_user(), timeout=60)
    time.sleep(1.0)  # let the exiting workers release their CPU too
