"""Ray actor options that place a role's replica on its pool: plain dicts computed from the cluster config.

No Ray import here, so the reward deployment (in ``rollarc.rewards``) and the runtime's workers share
one placement rule without the rewards package depending on ``rollarc.runtime``. How a pool becomes
Ray resources is described in ``rollarc.runtime.ray_cluster``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from rollarc.config.cluster import ClusterConfig, PoolConfig, RoleConfig
from rollarc.config.io import ConfigError, read_yaml

CATALOGUE = Path(__file__).resolve().parents[2] / "configs" / "cluster" / "hardware.yaml"
# Ray's accelerator_type resources are a presence marker; asking a sliver of one restricts placement to such nodes.
ACCELERATOR_MARKER = 0.001


def pool_resource(name: str, pool: PoolConfig) -> str:
    return pool.resource or f"pool_{name}"


@functools.lru_cache(maxsize=1)
def _gpu_kinds() -> frozenset[str]:
    # Only the names under ``gpus:`` are needed; rollarc.cluster.catalogue (a higher layer) validates the rest.
    gpus = read_yaml(CATALOGUE).get("gpus")
    if not isinstance(gpus, dict):
        raise ConfigError(f"{CATALOGUE}: needs a 'gpus:' mapping of GPU kinds")
    return frozenset(gpus)


def is_gpu_kind(kind: str) -> bool:
    """A pool kind is a GPU when the hardware catalogue lists it under ``gpus:``; ``cpu`` never is."""
    return kind != "cpu" and kind in _gpu_kinds()


def accelerator_resource(kind: str) -> str:
    """Ray's name for nodes with this GPU kind: ``accelerator_type:H800`` for ``h800``."""
    return f"accelerator_type:{kind.upper()}"


def actor_options(
    cluster: ClusterConfig, role: RoleConfig, name: str | None = None, *, gpus: bool = False
) -> dict[str, Any]:
    """Ray actor options that place one replica of ``role`` on its pool with pinned torch threads.

    ``gpus`` (from ``rollarc.runtime.ray_cluster.uses_gpus``): replicas on GPU-kind pools reserve
    ``num_gpus=units`` (then Ray sets their ``CUDA_VISIBLE_DEVICES``, and the actor's ``cuda:0`` is its own GPU).
    """
    threads = str(role.threads)
    pool = cluster.pools[role.pool]
    resources = {pool_resource(role.pool, pool): role.units} if role.units else {}
    num_gpus = 0.0
    if gpus and role.units and is_gpu_kind(pool.kind):
        num_gpus = role.units
        if cluster.address is not None and pool.resource is None:
            resources = {accelerator_resource(pool.kind): ACCELERATOR_MARKER}
    options: dict[str, Any] = {
        "num_cpus": 0,
        "resources": resources,
        "runtime_env": {
            "env_vars": {
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
                "TOKENIZERS_PARALLELISM": "false",
                **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
            }
        },
    }
    if num_gpus:
        options["num_gpus"] = num_gpus
    if name is not None:
        options["name"] = name
    return options
