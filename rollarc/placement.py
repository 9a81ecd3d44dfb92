"""Ray actor options that place a role's replica on its pool: plain dicts computed from the cluster config.

No Ray import here, so the reward deployment (in ``rollarc.rewards``) and the runtime's workers share
one placement rule without the rewards package depending on ``rollarc.runtime``.
"""

from __future__ import annotations

import os
from typing import Any

from rollarc.cluster_config import ClusterConfig, PoolConfig, RoleConfig


def pool_resource(name: str, pool: PoolConfig) -> str:
    return pool.resource or f"pool_{name}"


def actor_options(cluster: ClusterConfig, role: RoleConfig, name: str | None = None) -> dict[str, Any]:
    """Ray actor options that place one replica of ``role`` on its pool with pinned torch threads."""
    threads = str(role.threads)
    options: dict[str, Any] = {
        "num_cpus": 0,
        "resources": {pool_resource(role.pool, cluster.pools[role.pool]): role.units} if role.units else {},
        "runtime_env": {"env_vars": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                                     "TOKENIZERS_PARALLELISM": "false",
                                     **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ
                                        else {})}},
    }
    if name is not None:
        options["name"] = name
    return options
