"""Which nodes of a Ray cluster the run joined are spot capacity, and which explorer slot goes where (pure).

On a cluster rollarc did not start (``--address``, ``cluster.address``) the operator marks spot nodes with the
spot pool's custom resource (``ray start --resources='{"pool_spot": 1}'``, or the name in
``cluster.pools.<spot pool>.resource``); its amount on a node is how many explorer slots that node offers. The
fleet never adds or removes such nodes: it places its slots on the ones alive and not draining, and a slot whose
node went away is placed again on whatever spot capacity is there at the next poll. The Ray side (reading the
GCS) is :mod:`rollarc.diffusion.joined_nodes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeView:
    """What the fleet needs of one Ray node: its id (hex), whether it is alive, whether it is the head, and its
    total resources."""

    node_id: str
    alive: bool
    head: bool
    resources: Mapping[str, float]


def spot_capacity(nodes: Sequence[NodeView], resource: str, draining: Set[str]) -> dict[str, int]:
    """Explorer slots each usable spot node offers: the whole units of ``resource`` on every alive node that is not
    draining (a draining node is about to go: nothing new is placed there)."""
    return {
        n.node_id: int(n.resources.get(resource, 0.0))
        for n in nodes
        if n.alive and n.node_id not in draining and int(n.resources.get(resource, 0.0)) > 0
    }


def place(free_slots: Sequence[int], capacity: Mapping[str, int], used: Mapping[str, int]) -> dict[int, str]:
    """Free slots (in order) -> the spot node each goes to: each next slot to the node with the most spare units
    (``capacity`` minus ``used``), ties to the smaller node id, so slots spread over nodes; slots beyond the spare
    units stay free."""
    spare = {node: units - used.get(node, 0) for node, units in capacity.items()}
    out: dict[int, str] = {}
    for slot in free_slots:
        best = min((node for node, left in spare.items() if left > 0), key=lambda n: (-spare[n], n), default=None)
        if best is None:
            break
        out[slot] = best
        spare[best] -= 1
    return out


def queue_node(nodes: Sequence[NodeView], resource: str) -> str | None:
    """The node for the fleet's queue (it must outlive every preemption): the head if it is alive and not spot,
    else the first alive node without ``resource`` (by id); None when every alive node is spot."""
    safe = sorted((not n.head, n.node_id) for n in nodes if n.alive and n.resources.get(resource, 0.0) <= 0)
    return safe[0][1] if safe else None
