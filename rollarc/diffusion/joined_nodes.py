"""The spot nodes of a Ray cluster the run joined, read from the GCS (the fleet neither adds nor removes them).

:class:`JoinedNodes` reads every node (``GcsClient.get_all_node_info``, the call Ray Serve's node cache makes) and
the draining ones, each call bounded by a timeout, at most once every ``poll_s``; which of them are spot and where
each explorer slot goes is pure (:mod:`rollarc.spotlight.spot_nodes`).
"""

from __future__ import annotations

import time

import ray
from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Cython, no stubs (Ray Serve uses the same client)
from ray.core.generated import gcs_pb2

from rollarc.config.io import ConfigError
from rollarc.diffusion.drain_watcher import GCS_TIMEOUT_S, draining_nodes
from rollarc.spotlight.spot_nodes import NodeView, queue_node, spot_capacity

ALIVE = gcs_pb2.GcsNodeInfo.GcsNodeState.Value("ALIVE")  # type: ignore[attr-defined]  # generated protobuf


class JoinedNodes:
    """Spot capacity of the cluster this driver joined: the nodes carrying ``resource`` (the spot pool's)."""

    def __init__(self, resource: str, poll_s: float):
        self.resource, self.poll_s = resource, poll_s
        self.gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
        self.next_poll = 0.0

    def views(self) -> list[NodeView]:
        """Every node the GCS knows, alive or dead."""
        infos = self.gcs.get_all_node_info(timeout=GCS_TIMEOUT_S)
        return [
            NodeView(node_id.hex(), info.state == ALIVE, bool(info.is_head_node), dict(info.resources_total))
            for node_id, info in infos.items()
        ]

    def capacity(self) -> dict[str, int]:
        """Explorer slots each alive, not draining spot node offers now."""
        return spot_capacity(self.views(), self.resource, set(draining_nodes(self.gcs)))

    def poll_due(self) -> bool:
        """Whether ``poll_s`` has passed since the last poll that returned True (it starts the next interval)."""
        now = time.monotonic()
        if now < self.next_poll:
            return False
        self.next_poll = now + self.poll_s
        return True

    def queue_node(self) -> str:
        """The node the fleet's queue lives on (the head, unless it is spot); one line when there is none."""
        node = queue_node(self.views(), self.resource)
        if node is None:
            raise ConfigError(
                f"every alive node of the Ray cluster carries the spot resource {self.resource!r}: the fleet's queue "
                "needs a node that is not preempted; start the head (or one node) without it"
            )
        return node

    def check_some(self) -> None:
        """One line, at start-up, when no alive node offers spot capacity (a wrong resource name, or none started)."""
        if not self.capacity():
            raise ConfigError(
                f"no alive, non-draining node of the Ray cluster carries the spot pool's resource {self.resource!r}: "
                f"start spot nodes with ray start --resources='{{\"{self.resource}\": 1}}', or name their resource "
                "in cluster.pools.<spot pool>.resource"
            )
