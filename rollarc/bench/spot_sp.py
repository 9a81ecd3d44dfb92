"""``rollarc bench spot``, part 2: SP recovery on a local multi-node Ray cluster, elastic regroup vs warm restart.

Each SP member is a Ray actor on a node of its own (:class:`~rollarc.diffusion.sp_group.ElasticSPGroup`). A
round removes the node of the group's last member (as a cloud reclaims a VM) and, once Ray has seen the member
gone (``detect_s``, reported apart), times two recoveries at the same degree, each to the first forward pass of
the new group:

- **elastic**: the survivors form a new group with the weights they hold (nothing read from disk);
- **warm restart**: the same survivors (processes up, libraries imported) reload the weights from the
  checkpoint on disk and form a new group of that degree, what a non-elastic job with warm processes pays.

A replacement then joins on a new node (weights by broadcast from a peer) so the next round starts at the
original degree again. ``recovery_speedup`` is the median warm restart over the median elastic regroup. The
**cold restart** (new actors: process start, imports, weights from disk) is timed once at the end, labelled.

The DiT is the config's depth with ``heads`` heads on ``image_size`` pixels: the config's 4 heads and 64 tokens
allow no degree 3, and the goal is a loss where the survivors still form a group (3 → 2).
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import ray
import torch
from ray.cluster_utils import Cluster

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sp_group import ElasticSPGroup, on_nodes

VOCAB = ["one", "red", "square", "left", "two", "blue"]
DETECT_TIMEOUT_S = 120.0  # Ray marks a removed node's actors dead well within this


def _timed_forward(group: ElasticSPGroup, recover: Any, inputs: tuple[torch.Tensor, ...]) -> tuple[int, float]:
    """``recover()`` then one forward pass: the degree it returned and the seconds both took."""
    t0 = time.perf_counter()
    degree = int(recover())
    group.forward(*inputs)
    return degree, time.perf_counter() - t0


def sp_recovery(
    members: int, rounds: int, width: int, layers: int, heads: int, image_size: int, threads: int, workdir: Path
) -> dict[str, Any]:
    """``rounds`` node losses of an SP group of ``members``: elastic, warm and cold recovery seconds."""
    policy = build_policy(VOCAB, image_size, width, layers, heads, seed=0).eval()
    policy.save(workdir / "policy")
    x, t = torch.randn(2, 3, image_size, image_size), torch.tensor([0.9, 0.3])
    with torch.no_grad():
        hidden, mask = policy.encode(["one red square left", "two blue square"])
    inputs = (x, t, hidden, mask)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes: dict[str, Any] = {}  # the member nodes' resource names -> their Ray nodes
    slots: list[str] = []  # the n-th member ever started goes on the node of slots[n]

    def add_node() -> str:
        name = f"sp_node_{len(nodes)}"
        nodes[name] = cluster.add_node(num_cpus=0, resources={name: 1})
        slots.append(name)
        return name

    for _ in range(members):
        add_node()
    ray.init(address=cluster.address)
    group = None
    elastic, warm, detect, degrees = [], [], [], []
    try:
        group = ElasticSPGroup(members, workdir / "policy", threads, place=on_nodes(slots))
        group.form()
        group.forward(*inputs)  # warm: the first forward pays one-time costs
        for _ in range(rounds):
            node_of = {str(node.node_id): name for name, node in nodes.items()}
            victim = node_of[group.node_ids()[group.degree - 1]]
            cluster.remove_node(nodes.pop(victim), allow_graceful=False)
            detect.append(group.wait_for_loss(len(group.members) - 1, DETECT_TIMEOUT_S))
            loads = group.disk_loads()  # the survivors'
            degree, seconds = _timed_forward(group, group.form, inputs)
            if group.disk_loads() != loads:
                raise RuntimeError("an elastic regroup read the checkpoint")
            elastic.append(seconds)
            warm_degree, seconds = _timed_forward(group, group.warm_restart, inputs)
            if warm_degree != degree:
                raise RuntimeError(f"the warm restart formed degree {warm_degree}, the regroup {degree}")
            warm.append(seconds)
            degrees.append(degree)
            add_node()
            group.join(1)
            group.form(weights_from_peer=True)
            group.forward(*inputs)
        # the cold restart at the degree after a loss: new actors on the survivors' nodes
        node_of = {str(node.node_id): name for name, node in nodes.items()}
        survivors = [node_of[n] for n in group.node_ids()[: degrees[-1]]]
        group.close()
        slots.extend(survivors)
        _, cold = _timed_forward(group, partial(group.cold_restart, degrees[-1]), inputs)
    finally:
        if group is not None:
            group.close()
        ray.shutdown()
        cluster.shutdown()
    return {
        "members": members,
        "degree_after_loss": degrees[-1],
        "rounds": rounds,
        "elastic_s": elastic,
        "warm_restart_s": warm,
        "detect_s": detect,
        "cold_restart_s": cold,
        "recovery_speedup": statistics.median(warm) / max(statistics.median(elastic), 1e-9),
        "recovery_speedup_vs_cold": cold / max(statistics.median(elastic), 1e-9),
        "model": {"width": width, "layers": layers, "heads": heads, "image_size": image_size},
    }
