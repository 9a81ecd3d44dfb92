"""One local Ray cluster that the integration suite's runs join, instead of each run starting and stopping its own.

A run that starts Ray pays 3-6 s for the GCS, the raylet and their agents and 1-2 s to stop and reap them; about a
hundred runs in the suite did so. A run whose config names ``cluster.address`` joins a cluster instead (rollarc's
``--address`` path, as on a real cluster: the pools are that cluster's custom resources, declared here) and leaves it
by disconnecting: Ray ends the run's job and kills its actors, and the cluster stays up for the next run.

The cluster starts on the first :func:`address` call (a module that never joins never starts it), out of the pytest
process (``ray.cluster_utils.Cluster``: its own GCS and raylet processes), and stops at the end of the session
(``pytest_sessionfinish`` in ``tests/integration/conftest.py``). Tests that need a cluster of their own (pinning
cores, loopback binding, several nodes, removing nodes, a pool the cluster must lack, a local cluster's own start
and stop) keep starting one, and say why in their docstring.
"""

from __future__ import annotations

import psutil
from ray._private.authentication.authentication_token_setup import (
    enable_token_auth_by_default,
    ensure_token_if_auth_enabled,
)
from ray.cluster_utils import Cluster

# The pools that joining configs name, as the custom resources a joined run reserves (``pool_<name>``), with room
# for a run's actors while the previous run's are still exiting.
POOLS = {"pool_compute": 8.0, "pool_cpu": 8.0, "pool_reward": 8.0}
NUM_CPUS = 2  # the machine's cores, as a local run declares them (actors reserve none: placement is by pool)

_cluster: Cluster | None = None


def address() -> str:
    """The shared cluster's GCS address, starting the cluster on the first call."""
    global _cluster
    if _cluster is None:
        # Token authentication, as on every local cluster of the suite: a new local ``ray.init`` turns it on for the
        # whole process (RAY_AUTH_MODE=token), and a driver in token mode cannot join a cluster started without it.
        # ``Cluster`` does not do this itself; these are the two calls ``ray.init`` makes for a new cluster.
        enable_token_auth_by_default()
        ensure_token_if_auth_enabled(None, create_token_if_missing=True)
        _cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": NUM_CPUS, "resources": POOLS, "include_dashboard": False}
        )
    return str(_cluster.address)


def daemons() -> set[int]:
    """The process ids of the shared cluster's own processes (GCS, raylet, agents), if it runs."""
    if _cluster is None:
        return set()
    pids = set()
    for infos in _cluster.head_node.all_processes.values():
        pids.update(info.process.pid for info in infos if info.process is not None)
    return pids


STAYING = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")  # the raylet's own children between runs


def staying() -> set[int]:
    """The shared cluster's processes that stay up between runs: its daemons (GCS, raylet, dashboard, monitors) and
    the raylet's idle workers and agents. A run's actors, also the raylet's children, are not among them."""
    pids = daemons()
    for pid in list(pids):
        try:
            children = psutil.Process(pid).children()
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                if child.name() in STAYING:
                    pids.add(child.pid)
            except psutil.NoSuchProcess:
                continue
    return pids


def shutdown() -> None:
    global _cluster
    if _cluster is not None:
        cluster, _cluster = _cluster, None
        cluster.shutdown()
