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

When some pools' nodes join during the run (a spot pool, ``RayStart.joining_pools``), the local cluster is a
``ray.cluster_utils.Cluster``: a head node with the other pools now, and a node per unit of the joining pool
added (and removed, by the preemption injector) later. It is started, checked and stopped here too.

A local cluster listens on the loopback interface when the ``rollarc`` command started it (see
``rollarc.rayproc.loopback``), and :func:`stop_ray` makes sure its processes are gone; a watcher process
(``rollarc.rayproc.reaper``) reaps them if the driver dies without stopping it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.cluster_utils import Cluster

from rollarc.config.cluster import ClusterConfig, PoolConfig
from rollarc.config.io import ConfigError
from rollarc.config.plugin_path import plugin_pythonpath as plugin_pythonpath
from rollarc.rayproc.local_start import init_local_ray
from rollarc.rayproc.placement import accelerator_resource, pool_resource
from rollarc.rayproc.placement import (
    actor_options as actor_options,  # re-exported: the runtime's workers import it here
)
from rollarc.rayproc.placement import is_gpu_kind as is_gpu_kind
from rollarc.rayproc.reaper import reap, start_watcher, stop_watcher
from rollarc.rose.pinning import available_cores, missing_cores, pin_threads_here, restore_threads_here

WATCHER_STOP_S = 10.0
_local_session: tuple[str, subprocess.Popen[bytes]] | None = None  # (session dir, watcher) of our local cluster
_local_nodes: Cluster | None = None  # our local multi-node cluster (RayStart.joining_pools), when there is one
_unpinned: list[int] | None = None  # the driver's affinity before cluster.cores pinned it, while pinned


class ClusterResourceError(ConfigError):
    """The Ray cluster cannot hold what the config asks for (a pool no node has, a GPU that is not there)."""


def uses_gpus(cluster: ClusterConfig, device: str) -> bool:
    """Whether replicas on GPU-kind pools reserve real GPUs (see the module docstring); needs Ray started."""
    if cluster.address is not None:
        return True
    return device != "cpu" and ray.cluster_resources().get("GPU", 0) > 0


def check_device(device: str, resources: dict[str, float]) -> None:
    """``model.device: cuda`` on a cluster without GPUs fails here, at start-up, in one line."""
    if device == "cuda" and resources.get("GPU", 0) <= 0:
        raise ClusterResourceError(
            "model.device is 'cuda' but the Ray cluster has no GPU; use model.device=auto "
            "or cpu, or start Ray nodes with GPUs"
        )


@dataclass(frozen=True)
class RayStart:
    """What starting (or joining) Ray needs, whichever kind of run asks: :func:`start_ray` builds one from an
    LLM ``ClusterConfig``, the t2i entry from its own config.

    ``joining_pools`` names pools whose nodes join during the run (a spot pool whose nodes the preemption
    injector removes and replaces): locally Ray then starts as a ``ray.cluster_utils.Cluster`` whose head
    holds every other pool and ``head_resources``, so nodes can be added and removed later
    (:func:`local_nodes`); those pools are not checked at start-up.
    """

    pools: Mapping[str, PoolConfig]
    num_cpus: int | None = None
    address: str | None = None
    include_dashboard: bool = False
    dashboard_host: str = "127.0.0.1"
    gpu_demand: float = 0.0  # GPUs the roles on GPU-kind pools reserve (checked against a local machine's)
    joining_pools: tuple[str, ...] = ()
    head_resources: Mapping[str, float] = field(default_factory=dict)


def start_ray(
    cluster: ClusterConfig, address: str | None = None, plugin_paths: list[str] | None = None, device: str = "auto"
) -> dict[str, float]:
    """Start a local Ray cluster with the pools as logical resources, or join ``address``; return resources.

    Raises :class:`ClusterResourceError` (after shutting Ray down) when a pool, or the GPU that
    ``device='cuda'`` needs, is not in the cluster. ``cluster.cores``: the driver is pinned first, so that the
    local cluster's processes inherit it; :func:`stop_ray` unpins it.
    """
    if cluster.cores is not None:
        _pin_driver(cluster.cores)
    spec = RayStart(
        pools=cluster.pools,
        num_cpus=cluster.num_cpus,
        address=address or cluster.address,
        include_dashboard=cluster.include_dashboard,
        dashboard_host=cluster.dashboard_host,
        gpu_demand=gpu_demand(cluster),
    )
    return start_cluster(spec, plugin_paths, device)


def start_cluster(spec: RayStart, plugin_paths: list[str] | None = None, device: str = "auto") -> dict[str, float]:
    """:func:`start_ray` for a :class:`RayStart`: the one way every ``rollarc train`` starts or joins Ray."""
    global _local_session, _local_nodes
    address = spec.address
    if ray.is_initialized():
        stop_ray()
    if plugin_paths:
        os.environ["PYTHONPATH"] = plugin_pythonpath(plugin_paths)  # inherited by local Ray workers
    resources = {pool_resource(n, p): float(p.count) for n, p in spec.pools.items() if n not in spec.joining_pools}
    if address is None and spec.joining_pools:  # a head now, the joining pools' nodes later
        _local_nodes = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": spec.num_cpus or os.cpu_count() or 1,
                "resources": {**resources, **spec.head_resources},
                "include_dashboard": spec.include_dashboard,
            },
        )
        joined = ray.init(address=_local_nodes.address, logging_level=logging.WARNING)
        session_dir = str(joined.address_info["session_dir"])  # type: ignore[attr-defined]  # a RayContext; every node shares the session
        _local_session = (session_dir, start_watcher(session_dir))
    elif address is None:
        context = init_local_ray(  # a new cluster even when `ray start` left one on this machine
            num_cpus=spec.num_cpus or os.cpu_count() or 1,
            resources={**resources, **spec.head_resources},
            include_dashboard=spec.include_dashboard,
            dashboard_host=spec.dashboard_host,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )
        session_dir = str(context.address_info["session_dir"])  # a local init returns a RayContext
        _local_session = (session_dir, start_watcher(session_dir))
    else:
        env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if plugin_paths else None
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=env)
    available = ray.cluster_resources()
    have = pool_capacity(spec, address is not None, available, ray.nodes())
    missing = [
        f"{what} (need {p.count}, have {have[n][1]:g})"
        for n, p in spec.pools.items()
        for what in [have[n][0]]
        if have[n][1] < p.count and n not in spec.joining_pools
    ]
    if missing:
        stop_ray()
        raise ClusterResourceError(
            "the Ray cluster lacks the configured pools: "
            + ", ".join(missing)
            + ". Start nodes with --resources (or GPUs of that kind), or fix cluster.pools."
        )
    try:
        check_device(device, available)
        if address is None and device != "cpu" and available.get("GPU", 0) > 0:
            _check_gpu_fit(spec.gpu_demand, available.get("GPU", 0.0))
    except ClusterResourceError:
        stop_ray()
        raise
    return available


def _pin_driver(cores: list[int]) -> None:
    """Pin this process's threads to ``cores`` (``cluster.cores``), remembering its affinity for :func:`stop_ray`."""
    global _unpinned
    problem = missing_cores(cores, "cluster.cores")
    if problem is not None:
        raise ClusterResourceError(problem)
    if ray.is_initialized():
        stop_ray()  # the affinity to restore is the one before any pinning
    before = available_cores()
    if not pin_threads_here(cores):
        raise ClusterResourceError(f"cluster.cores {cores}: this OS or container does not allow pinning; drop it")
    _unpinned = before


def pinned_driver() -> list[int] | None:
    """The cores the driver was pinned to by ``cluster.cores`` for the Ray cluster running now, or None."""
    return None if _unpinned is None else available_cores()


def local_nodes() -> Cluster:
    """The local multi-node cluster :func:`start_cluster` started for a ``RayStart`` with ``joining_pools``."""
    if _local_nodes is None:
        raise RuntimeError("no local multi-node Ray cluster: start_cluster was not given joining_pools")
    return _local_nodes


def stop_ray() -> None:
    """``ray.shutdown``; for a local cluster rollarc started, also wait for (or kill) its processes, and unpin the
    driver (``cluster.cores``)."""
    global _local_session, _local_nodes, _unpinned
    ray.shutdown()
    if _unpinned is not None:
        restore_threads_here(_unpinned)
        _unpinned = None
    if _local_nodes is not None:
        nodes, _local_nodes = _local_nodes, None
        nodes.shutdown()
    if _local_session is None:
        return
    session_dir, watcher = _local_session
    _local_session = None
    reap(session_dir)
    stop_watcher(watcher, WATCHER_STOP_S)


def gpu_demand(cluster: ClusterConfig) -> float:
    """GPUs the roles on GPU-kind pools reserve: replicas × units, summed."""
    roles = cluster.roles
    specs = [roles.train, roles.env, roles.reward, *roles.rollout]
    return sum(r.replicas * r.units for r in specs if is_gpu_kind(cluster.pools[r.pool].kind))


def check_local_gpus(cluster: ClusterConfig, gpus: float) -> None:
    """On a local machine with GPUs, the roles must fit its GPUs, or their actors would wait forever."""
    _check_gpu_fit(gpu_demand(cluster), gpus)


def _check_gpu_fit(need: float, gpus: float) -> None:
    if need > gpus:
        raise ClusterResourceError(
            f"the roles on GPU pools reserve {need:g} GPUs but this machine has {gpus:g}; "
            "lower cluster.roles.*.replicas or units, or set model.device=cpu"
        )


def pool_capacity(
    cluster: ClusterConfig | RayStart, joined: bool, available: dict[str, float], nodes: list[dict[str, Any]]
) -> dict[str, tuple[str, float]]:
    """For each pool, what it is made of in Ray (a description) and how many units the cluster holds.

    A GPU-kind pool of an existing cluster without ``resource:`` counts the GPUs of the alive nodes that
    carry ``accelerator_type:<KIND>``; every other pool counts its custom resource.
    """
    result: dict[str, tuple[str, float]] = {}
    for name, pool in cluster.pools.items():
        if joined and pool.resource is None and is_gpu_kind(pool.kind):
            marker = accelerator_resource(pool.kind)
            gpus = sum(
                node["Resources"].get("GPU", 0.0)
                for node in nodes
                if node.get("Alive", True) and marker in node["Resources"]
            )
            result[name] = (f"GPUs on nodes with {marker}", gpus)
        else:
            resource = pool_resource(name, pool)
            result[name] = (resource, available.get(resource, 0.0))
    return result
