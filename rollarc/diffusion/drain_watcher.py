"""Spotlight's preemption notices from Ray's node draining, and the injector's way of draining a node.

On a Ray cluster a spot VM's termination reaches the application as a drain of its node: the autoscaler
(and KubeRay, and ``ray drain-node``) call the GCS DrainNode API with reason ``DRAIN_NODE_REASON_PREEMPTION``
and a deadline. :class:`DrainWatcher` polls the GCS's draining nodes (``GcsClient.get_draining_nodes``, the
map Ray Serve's ``cluster_node_info_cache`` and Ray Train v2's ``PreemptionWatcher`` poll) and hands every
spot worker on a draining node to a callback once (which pure :func:`~rollarc.spotlight.drain_notice.to_notice`
decides); the fleet's callback is Spotlight's notice.

The reason: Ray 2.60 reports draining nodes with their deadline only; the reason is kept by the GCS but
reaches clients only once the node is dead (``death_info``). The watcher takes every drain of a node
hosting a spot worker as a preemption: the raylet rejects an idle-termination drain of a node that is not
idle, and a node running a worker is not, so what is left is a preemption or an operator's drain, and the
node is going either way.

:func:`drain` is the local injector's side: the same DrainNode call as ``ray drain-node`` (ray/scripts/
scripts.py ``drain_node``) and Ray's own chaos killer (ray/_private/test_utils.py ``_drain_node``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import ray
from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Cython, no stubs (Ray's CLI uses the same client)
from ray.core.generated import autoscaler_pb2
from ray.exceptions import GetTimeoutError, RpcError

from rollarc.spotlight.drain_notice import seconds_left, to_notice

GCS_TIMEOUT_S = 30.0  # a GCS call that takes longer means the cluster is gone


def _gcs() -> GcsClient:
    """A GCS client of the cluster this driver is connected to."""
    return GcsClient(address=ray.get_runtime_context().gcs_address)


def draining_nodes(gcs: GcsClient) -> dict[str, int]:
    """Ray's draining nodes: node id hex -> deadline (ms since the epoch; 0: none)."""
    return dict(gcs.get_draining_nodes(timeout=GCS_TIMEOUT_S))


def drain(node_id: str, notice_s: float, message: str) -> None:
    """Ask the GCS to drain ``node_id`` for preemption, its deadline ``notice_s`` from now."""
    deadline_ms = time.time_ns() // 1_000_000 + int(notice_s * 1000)
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")  # type: ignore[attr-defined]
    accepted, why = _gcs().drain_node(node_id, reason, message, deadline_ms, timeout=GCS_TIMEOUT_S)
    if not accepted:
        raise RuntimeError(f"Ray refused to drain spot node {node_id}: {why}")


class DrainWatcher:
    """A thread that polls Ray's draining nodes every ``poll_s`` and calls ``notice(worker, seconds_left)`` once for
    every worker that ``workers()`` (worker -> node id hex) places on a draining node (seconds_left: None when
    the drain has no deadline).

    A poll the GCS fails or does not answer (``RpcError``, ``GetTimeoutError``: a GCS restarting, a network blip)
    is counted in ``poll_errors`` and the thread polls again; it says so in one line when the polls start failing
    and when they work again. Until then a preemption still ends as a lease expiry, so no job is lost."""

    def __init__(
        self,
        workers: Callable[[], dict[str, str]],
        notice: Callable[[str, float | None], None],
        poll_s: float,
        stop: threading.Event,
    ):
        self.workers, self.notice, self.poll_s, self.stop = workers, notice, poll_s, stop
        self.noticed: set[str] = set()
        self.poll_errors = 0
        self.failing = False
        self.thread = threading.Thread(target=self._run, name="spot-drain-watcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def poll(self, gcs: GcsClient) -> list[str]:
        """One poll: notice the workers on newly draining nodes; returns them."""
        draining = draining_nodes(gcs)
        if not draining:
            return []
        nodes = self.workers()
        now = time.time()
        due = to_notice(draining, nodes, self.noticed)
        for worker in due:
            self.noticed.add(worker)
            self.notice(worker, seconds_left(draining[nodes[worker]], now))
        return due

    def _run(self) -> None:
        gcs = _gcs()
        while not self.stop.wait(self.poll_s):
            self.poll_once(gcs)

    def poll_once(self, gcs: GcsClient) -> None:
        """One poll of the thread: a failed GCS call is counted and said once, never the end of the watcher."""
        try:
            self.poll(gcs)
        except (RpcError, GetTimeoutError) as err:
            self.poll_errors += 1
            if not self.failing:
                self.failing = True
                print(
                    f"rollarc: spot drain watcher: reading Ray's draining nodes failed ({err}); retrying every "
                    f"{self.poll_s:g} s (preemptions meanwhile end as lease expiries)",
                    file=sys.stderr,
                    flush=True,
                )
            return
        if self.failing:
            self.failing = False
            print(
                f"rollarc: spot drain watcher: reading Ray's draining nodes works again ({self.poll_errors} failed "
                "polls)",
                file=sys.stderr,
                flush=True,
            )

    def join(self, timeout_s: float) -> None:
        if self.thread.ident is not None:
            self.thread.join(timeout=timeout_s)
