"""A local cluster started by rollarc listens on loopback only, and none of its processes outlive the driver.

It starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): what it checks is
the cluster a run starts itself, its daemons bound to loopback and its processes reaped after ``stop_ray`` or a
killed driver.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rollarc.rayproc.reaper import session_processes

pytestmark = pytest.mark.slow

START = """
import json, os, sys, time
from rollarc.rayproc.loopback import keep_local_ray_on_loopback
assert keep_local_ray_on_loopback()  # what `rollarc train` does before Ray is imported
import psutil, ray
from rollarc.config.cluster import ClusterConfig
from rollarc.runtime import ray_cluster
from rollarc.rayproc.reaper import session_processes

ray_cluster.start_ray(ClusterConfig(num_cpus=1))
session_dir = ray_cluster._local_session[0]

@ray.remote(num_cpus=0)
def pid():
    return os.getpid()

ray.get(pid.remote())  # a worker process, with its own gRPC server

def listening():
    pids = {os.getpid(), *(p.pid for p in session_processes(session_dir))}
    return [
        [psutil.Process(c.pid).name(), c.laddr.ip, c.laddr.port]
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]

print(json.dumps({"session_dir": session_dir, "listening": listening()}), flush=True)
if sys.argv[1] == "stop":
    ray_cluster.stop_ray()
    print(json.dumps({"left": [p.pid for p in session_processes(session_dir)]}), flush=True)
else:
    time.sleep(3600)  # the test kills this driver with SIGKILL
"""


def start(mode: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    return subprocess.Popen(
        [sys.executable, "-c", START, mode], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )


def test_every_daemon_listens_on_loopback_and_stop_ray_leaves_no_process():
    driver = start("stop")
    out, _ = driver.communicate(timeout=300)
    first, second = (json.loads(line) for line in out.strip().splitlines()[-2:])
    names = {name for name, _, _ in first["listening"]}
    assert {"gcs_server", "raylet"} <= names, first["listening"]
    for name, ip, port in first["listening"]:
        address = ipaddress.ip_address(ip)
        loopback = address.ipv4_mapped.is_loopback if getattr(address, "ipv4_mapped", None) else address.is_loopback
        assert loopback, f"{name} listens on {ip}:{port}"
    assert second["left"] == []


def test_a_killed_driver_leaves_no_ray_process_behind():
    driver = start("sleep")
    assert driver.stdout is not None
    session_dir = json.loads(driver.stdout.readline())["session_dir"]
    assert session_processes(session_dir)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    deadline = time.monotonic() + 120  # the watcher polls every second, then gives a 5 s grace period
    while session_processes(session_dir) and time.monotonic() < deadline:
        time.sleep(1)
    left = [(p.pid, p.name()) for p in session_processes(session_dir) if p.is_running()]
    assert left == []
