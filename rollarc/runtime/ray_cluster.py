"""Resource pools as Ray resources, and starting or joining a Ray cluster.

How a pool becomes Ray resources (``actor_options``), by where Ray runs and the pool's ``kind``
(GPU kinds are the ``gpus:`` of the hardware catalogue ``configs/cluster/hardware.yaml``):

- **Local cluster** (rollarc starts Ray; no ``--address``): every pool is a logical custom resource
  (``pool_<name>`` unless the config names one) declared at ``ray.init`` with the pool's count, so
  placement runs exactly as on a cluster. A replica reserves ``units`` of it and no CPU
  (``num_cpus=0``), so two cores can host every role. If the machine has GPUs and ``model.device`` is
  not ``cpu``, replicas on GPU-kind pools also ask ``num_gpus=units``, so Ray gives each its own GPU
  (``CUDA_VISIBLE_DEVICES``). A laptop has no GPU: nothing changes there.
- **Existing cluster** (``--address`` or ``cluster.address``): pools are real resources. A replica on
  a GPU-kind pool asks ``num_gpus=units`` plus, to land on that kind of GPU, Ray's
  ``accelerator_type:<KIND>`` (e.g. ``accelerator_type:H800``, which Ray sets on nodes it detects, or
  ``ray start --resources='{"accelerator_type:H800": 1}'``), or the pool's ``resource:`` when given
  (a custom resource the nodes are started with). A CPU pool is a custom resource, as locally:
  ``ray start --resources='{"pool_cpu": 64}'``.

At start-up every pool is checked against what the cluster has; a missing one is a one-line
:class:`ClusterResourceError`, not an actor that waits forever.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import ray

from rollarc.config import ClusterConfig, PoolConfig, RoleConfig
from rollarc.configio import ConfigError

CATALOGUE = Path(__file__).resolve().parents[2] / "configs" / "cluster" / "hardware.yaml"
# Ray's accelerator_type resources are a presence marker; asking a sliver of one restricts placement to such nodes.
ACCELERATOR_MARKER = 0.001


class ClusterResourceError(ConfigError):
    """The Ray cluster cannot hold what the config asks for (a pool no node has, a GPU that is not there)."""


def pool_resource(name: str, pool: PoolConfig) -> str:
    return pool.resource or f"pool_{name}"


@functools.lru_cache(maxsize=1)
def _gpu_kinds() -> frozenset[str]:
    from rollarc.cluster.catalogue import load_catalogue

    return frozenset(load_catalogue(CATALOGUE).gpus)


def is_gpu_kind(kind: str) -> bool:
    """A pool kind is a GPU when the hardware catalogue lists it under ``gpus:``; ``cpu`` never is."""
    return kind != "cpu" and kind in _gpu_kinds()


def accelerator_resource(kind: str) -> str:
    """Ray's name for nodes with this GPU kind: ``accelerator_type:H800`` for ``h800``."""
    return f"accelerator_type:{kind.upper()}"


def uses_gpus(cluster: ClusterConfig, device: str) -> bool:
    """Whether replicas on GPU-kind pools reserve real GPUs (see the module docstring); needs Ray started."""
    if cluster.address is not None:
        return True
    return device != "cpu" and ray.cluster_resources().get("GPU", 0) > 0


def check_device(device: str, resources: dict[str, float]) -> None:
    """``model.device: cuda`` on a cluster without GPUs fails here, at start-up, in one line."""
    if device == "cuda" and resources.get("GPU", 0) <= 0:
        raise ClusterResourceError("model.device is 'cuda' but the Ray cluster has no GPU; use model.device=auto "
                                   "or cpu, or start Ray nodes with GPUs")


def plugin_pythonpath(paths: list[str]) -> str:
    """``PYTHONPATH`` with the plugin directories (absolute) in front; also put on this process's sys.path."""
    absolute = [str(Path(p).resolve()) for p in paths]
    for path in reversed(absolute):
        if path not in sys.path:
            sys.path.insert(0, path)
    current = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*absolute, *([current] if current else [])])


def start_ray(cluster: ClusterConfig, address: str | None = None, plugin_paths: list[str] | None = None,
              device: str = "auto") -> dict[str, float]:
    """Start a local Ray cluster with the pools as logical resources, or join ``address``; return resources.

    Raises :class:`ClusterResourceError` (after shutting Ray down) when a pool, or the GPU that
    ``device='cuda'`` needs, is not in the cluster.
    """
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
            logging_level="warning",
            log_to_driver=True,
        )
    else:
        env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if plugin_paths else None
        ray.init(address=address, logging_level="warning", runtime_env=env)
    available = ray.cluster_resources()
    have = pool_capacity(cluster, address is not None, available, ray.nodes())
    missing = [f"{what} (need {p.count}, have {have[n][1]:g})" for n, p in cluster.pools.items()
               for what in [have[n][0]] if have[n][1] < p.count]
    if missing:
        ray.shutdown()
        raise ClusterResourceError("the Ray cluster lacks the configured pools: " + ", ".join(missing)
                                   + ". Start nodes with --resources (or GPUs of that kind), or fix cluster.pools.")
    try:
        check_device(device, available)
        if address is None and uses_gpus(cluster, device):
            check_local_gpus(cluster, available.get("GPU", 0.0))
    except ClusterResourceError:
        ray.shutdown()
        raise
    return available


def gpu_demand(cluster: ClusterConfig) -> float:
    """GPUs the roles on GPU-kind pools reserve: replicas × units, summed."""
    roles = cluster.roles
    specs = [roles.train, roles.env, roles.reward, *roles.rollout]
    return sum(r.replicas * r.units for r in specs if is_gpu_kind(cluster.pools[r.pool].kind))


def check_local_gpus(cluster: ClusterConfig, gpus: float) -> None:
    """On a local machine with GPUs, the roles must fit its GPUs, or their actors would wait forever."""
    need = gpu_demand(cluster)
    if need > gpus:
        raise ClusterResourceError(f"the roles on GPU pools reserve {need:g} GPUs but this machine has {gpus:g}; "
                                   "lower cluster.roles.*.replicas or units, or set model.device=cpu")


def pool_capacity(cluster: ClusterConfig, joined: bool, available: dict[str, float],
                  nodes: list[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """For each pool, what it is made of in Ray (a description) and how many units the cluster holds.

    A GPU-kind pool of an existing cluster without ``resource:`` counts the GPUs of the alive nodes that
    carry ``accelerator_type:<KIND>``; every other pool counts its custom resource.
    """
    result: dict[str, tuple[str, float]] = {}
    for name, pool in cluster.pools.items():
        if joined and pool.resource is None and is_gpu_kind(pool.kind):
            marker = accelerator_resource(pool.kind)
            gpus = sum(node["Resources"].get("GPU", 0.0) for node in nodes
                       if node.get("Alive", True) and marker in node["Resources"])
            result[name] = (f"GPUs on nodes with {marker}", gpus)
        else:
            resource = pool_resource(name, pool)
            result[name] = (resource, available.get(resource, 0.0))
    return result


def actor_options(cluster: ClusterConfig, role: RoleConfig, name: str | None = None, *, gpus: bool = False
                  ) -> dict[str, Any]:
    """Ray actor options that place one replica of ``role`` on its pool with pinned torch threads.

    ``gpus`` (from :func:`uses_gpus`): replicas on GPU-kind pools reserve ``num_gpus=units`` (then Ray sets
    their ``CUDA_VISIBLE_DEVICES``, and the actor's ``cuda:0`` is its own GPU).
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
        "runtime_env": {"env_vars": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                                     "TOKENIZERS_PARALLELISM": "false",
                                     **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ
                                        else {})}},
    }
    if num_gpus:
        options["num_gpus"] = num_gpus
    if name is not None:
        options["name"] = name
    return options
