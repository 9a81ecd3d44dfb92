"""Where the t2i path computes: GPUs a role and its SP members reserve, the SP group's transport, and the
start-up check of ``model.device`` (the same key and names as the LLM path: ``rollarc.models.device``).

Pure decisions, so they are tested without a GPU. Each actor resolves ``model.device`` itself
(:func:`~rollarc.models.device.resolve_device`): Ray shows an actor only the GPUs it reserved, so a role
reserves GPUs exactly when it should compute on one.

**Placement.** As on the LLM path (``rollarc.rayproc.placement``), a role on a GPU-kind pool reserves
``num_gpus = units`` when ``model.device`` is not ``cpu`` and GPUs are there (a joined cluster's pools are
real resources, so they are assumed there). Each SP member of that role reserves the same amount: a member
stands for one device of the role, so ``sp_degree`` members on ``units: 1`` take ``sp_degree`` GPUs, and
fractional units let members share one GPU.

**Transport.** NCCL on CUDA when every member has a GPU of its own. NCCL refuses two ranks of one group on
one device, so members sharing a GPU (``units`` below 1) use gloo, and since gloo's all-to-all and all-gather
take CPU tensors only, the Ulysses exchanges are staged through the CPU there (the forward still runs on
the GPU). On the CPU: gloo.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SPTransport:
    """The process-group backend of an SP group, and whether its collectives copy their tensors through the CPU."""

    backend: str
    staged: bool


def sp_transport(device_type: str, gpus_per_member: float) -> SPTransport:
    """The transport of a group whose members compute on ``device_type``, each reserving ``gpus_per_member``."""
    if device_type == "cpu":
        return SPTransport("gloo", staged=False)
    if device_type != "cuda":
        raise ValueError(f"SP groups run on cpu or cuda, not {device_type!r}")
    if gpus_per_member >= 1:
        return SPTransport("nccl", staged=False)
    return SPTransport("gloo", staged=True)  # members share a GPU: NCCL refuses two ranks on one device


def role_gpus(device: str, gpu_pool: bool, units: float, joined: bool, cluster_gpus: float) -> float:
    """GPUs one replica of a t2i role (and each of its SP members) reserves; 0 keeps it on the CPU."""
    if device == "cpu" or not gpu_pool or not units:
        return 0.0
    return units if joined or cluster_gpus > 0 else 0.0


def device_problem(
    device: str, joined: bool, has_cuda: bool, role_pools: dict[str, tuple[str, bool]], spot_local: bool
) -> str | None:
    """Why ``model.device`` cannot hold here (one line naming the key and the fix), or None.

    ``role_pools``: each role in use -> (its pool's name, whether that pool is a GPU kind). Only ``cuda``
    can fail: ``auto`` falls back to the CPU in an actor without a GPU. On a joined cluster the cluster's
    GPUs are checked once Ray is up (``rollarc.runtime.ray_cluster.check_device``)."""
    if device != "cuda":
        return None
    if not joined and not has_cuda:
        return (
            "model.device is 'cuda' but this machine has no CUDA device (torch.cuda.is_available() is False); "
            "use model.device=cpu or auto"
        )
    cpu_roles = [f"{role} on {pool!r}" for role, (pool, gpu) in role_pools.items() if not gpu]
    if cpu_roles:
        return (
            f"model.device is 'cuda' but roles sit on pools of a CPU kind ({', '.join(cpu_roles)}), so Ray gives them "
            "no GPU; set cluster.pools.<name>.kind to a GPU kind of configs/cluster/hardware.yaml (e.g. h100)"
        )
    if spot_local:
        return (
            "model.device is 'cuda' with spot.enabled on a local cluster: the spot nodes rollarc adds have no GPUs; "
            "use model.device=auto (explorers on the CPU), or join a cluster (cluster.address)"
        )
    return None
