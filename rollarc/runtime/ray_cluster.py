"""Resource pools as Ray resources, and starting or joining a Ray cluster.

A pool is a Ray custom resource (``pool_<name>`` unless the config names one, e.g.
``accelerator_type:H800``). On a laptop the pools are declared as logical resources at ``ray.init``, so
placement runs exactly as on a cluster, where nodes are started with the same resources
(``ray start --resources '{"pool_h800": 8}'``). Actors reserve pool units, not CPUs (``num_cpus=0``),
so two cores can host every role while each role still lands only where its pool is.
"""

from __future__ import annotations

import logging
import os

import ray

from rollarc.cluster_config import ClusterConfig
from rollarc.placement import actor_options as actor_options  # re-exported for the runtime's workers
from rollarc.placement import pool_resource
from rollarc.plugin_path import plugin_pythonpath


def start_ray(cluster: ClusterConfig, address: str | None = None, plugin_paths: list[str] | None = None
              ) -> dict[str, float]:
    """Start a local Ray cluster with the pools as logical resources, or join ``address``; return resources."""
    address = address or cluster.address
    if ray.is_initialized():
        ray.shutdown()
    if plugin_paths:
        os.environ["PYTHONPATH"] = plugin_pythonpath(plugin_paths)  # inherited by local Ray workers
    if address is None:
        ray.init(
            num_cpus=cluster.num_cpus or os.cpu_count() or 1,
            resources={pool_resource(n, p): float(p.count) for n, p in cluster.pools.items()},
            include_dashboard=cluster.include_dashboard,
            dashboard_host=cluster.dashboard_host,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )
    else:
        env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if plugin_paths else None
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=env)
    available = ray.cluster_resources()
    missing = [f"{pool_resource(n, p)} (need {p.count}, have {available.get(pool_resource(n, p), 0):g})"
               for n, p in cluster.pools.items() if available.get(pool_resource(n, p), 0) < p.count]
    if missing:
        ray.shutdown()
        raise RuntimeError("the Ray cluster lacks the configured pools: " + ", ".join(missing)
                           + ". Start nodes with --resources, or fix cluster.pools.")
    return available
