"""The spot fleet's queue holder: one actor on the head node (never preempted) that owns the job queue, the leases and
the weight references the explorers fetch.

:class:`SpotQueue` wraps the pure :class:`~rollarc.spotlight.job_queue.JobQueue` with a monotonic clock, and keeps, for
the last two weight versions, the object-store references of the trainer's ``rollarc.sync`` update (the delta from the
version before) and of a full copy. A worker holding the version before takes the delta; any other (one that missed a
version, or a replacement that just joined with the run's start weights) takes the full copy; either way from memory
rather than from disk, and the bytes are counted (``sync_bytes``, ``sync_full_copies``). Ray restarts it empty when
its process dies; the fleet refills it (:mod:`rollarc.diffusion.queue_ledger`).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import ray

from rollarc.diffusion.resumable import InFlight
from rollarc.spotlight.job_queue import Beat, JobQueue, JobSpec, Lease

HEAD_RESOURCE = "spot_head"
QUEUE_NAME = "spot-queue"  # the queue actor's Ray name, before its fleet's tag
QUEUE_TIMEOUT_S = 60.0  # a call to the queue (on the head node) that takes longer means it is gone
SPOrder = tuple[str, int | None]  # ("shrink", the member started n-th or None) or ("grow", None)


def recovery_speedup(cold_s: list[float], regroup_s: list[float]) -> float | None:
    """Median cold start over median regroup, both measured in this run (``None`` until both happened)."""
    if not cold_s or not regroup_s:
        return None
    return statistics.median(cold_s) / max(statistics.median(regroup_s), 1e-9)


@ray.remote
class SpotQueue:
    def __init__(self, lease_s: float):
        self.incarnation = uuid.uuid4().hex  # new when Ray restarts the actor (empty): the fleet refills it
        self.queue = JobQueue(lease_s)
        self.weights: dict[int, tuple[int | None, list[Any]]] = {}
        self.synced: list[tuple[str, int, int, bool]] = []  # (worker, version, bytes, full copy)
        self.holds: dict[str, tuple[int, dict[str, int]]] = {}  # worker -> (version, checksums of its weights)
        self.closed = False
        # worker -> its pending SP orders: ("shrink", the member started n-th, None: the group's last) or ("grow", None)
        self.sp_orders: dict[str, list[SPOrder]] = {}
        self.sp_done: list[tuple[str, str, int, float]] = []  # (worker, order, degree after it, seconds)
        self.sp_cold: list[tuple[str, float]] = []  # (worker, seconds its SP group took to start cold)
        self.sp_member_nodes: dict[str, list[str]] = {}  # worker -> the Ray node of each of its first SP members

    def submit(self, jobs: list[JobSpec]) -> None:
        for job in jobs:
            self.queue.submit(job)

    def incarnation_id(self) -> str:
        return self.incarnation

    def refill(self, jobs: list[JobSpec]) -> None:
        """``submit`` after a restart, skipping the jobs this incarnation already has (a submit that was retried
        on it after the restart)."""
        self.submit([job for job in jobs if job.job_id not in self.queue.jobs])

    def pull(self, worker: str) -> Lease | None:
        return None if self.closed else self.queue.pull(worker, time.monotonic())

    def heartbeat(self, job_id: int, token: int, step: int) -> Beat:
        return self.queue.heartbeat(job_id, token, step, time.monotonic())

    def complete(self, job_id: int, token: int, result: dict[str, Any]) -> bool:
        return self.queue.complete(job_id, token, result)

    def commit(self, job_id: int, token: int, state: InFlight, step: int) -> bool:
        return self.queue.commit(job_id, token, state, step)

    def complete_and_pull(
        self, job_id: int, token: int, result: dict[str, Any], worker: str
    ) -> tuple[Lease | None, list[SPOrder]]:
        """``complete``, then ``worker``'s SP orders, then ``pull``, in one round trip (a pull worker's between
        jobs). No lease when an order is a grow: a joiner can take longer than a lease, so the worker grows
        first and pulls after."""
        self.complete(job_id, token, result)
        orders = self.take_sp_orders(worker, True)
        return (None if any(kind == "grow" for kind, _ in orders) else self.pull(worker)), orders

    def notice(self, worker: str) -> None:
        self.queue.notice(worker)

    def gone(self, worker: str) -> None:
        self.queue.gone(worker)

    def results(self, job_ids: list[int]) -> list[Any] | None:
        """The results of ``job_ids`` once all are in (expiring dead leases first), else None."""
        self.queue.expire(time.monotonic())
        if any(j not in self.queue.results for j in job_ids):
            return None
        return [self.queue.results[j] for j in job_ids]

    def order_sp(self, worker: str, order: str, member: int | None = None) -> None:
        """Tell ``worker`` to ``shrink`` its SP group (a member's notice: the member it started ``member``-th, whose
        node drains, or with None its group's last) or ``grow`` it (a member joined)."""
        self.sp_orders.setdefault(worker, []).append((order, member))

    def take_sp_orders(self, worker: str, grow: bool) -> list[SPOrder]:
        """``worker``'s pending orders: every shrink, and the grows only if ``grow`` (the worker is between jobs)."""
        orders = self.sp_orders.pop(worker, [])
        kept = [o for o in orders if o[0] == "grow" and not grow]
        if kept:
            self.sp_orders[worker] = kept
        return [o for o in orders if o[0] == "shrink" or grow]

    def sp_done_by(self, worker: str, order: str, degree: int, seconds: float) -> None:
        self.sp_done.append((worker, order, degree, seconds))

    def sp_group_up(self, worker: str) -> bool:
        """Whether ``worker``'s SP group has started (it reported its cold start and began pulling)."""
        return worker in self.sp_member_nodes

    def sp_cold_start_by(self, worker: str, seconds: float, member_nodes: list[str]) -> None:
        """A worker's SP group started cold (new processes, weights from disk): the regroup's baseline; with the
        Ray node each member reports it runs on."""
        self.sp_cold.append((worker, seconds))
        self.sp_member_nodes[worker] = member_nodes

    def put_weights(self, version: int, base: int | None, wrapped_refs: list[Any]) -> None:
        """Keep the references (wrapped in a list so Ray does not resolve them) of one weight version's update
        from ``base`` (None: the update is itself a full copy) and of its full copy."""
        self.weights[version] = (base, wrapped_refs)
        for old in [v for v in self.weights if v < version - 1]:
            del self.weights[old]

    def weights_of(self, version: int) -> tuple[int | None, list[Any]] | None:
        return self.weights.get(version)

    def synced_by(self, worker: str, version: int, nbytes: int, full: bool, checksums: dict[str, int]) -> None:
        """Record a worker's sync, with the checksums of the weights it now holds (an audit: a delta's
        application already checks its base)."""
        self.synced.append((worker, version, nbytes, full))
        self.holds[worker] = (version, checksums)

    def held_weights(self, worker: str) -> tuple[int, dict[str, int]] | None:
        """The version and weight checksums ``worker`` reported at its last sync (None: it has not synced)."""
        return self.holds.get(worker)

    def held(self) -> dict[int, tuple[str, int]]:
        """Leased jobs: id -> (worker, steps it reported done)."""
        return {j: (h.lease.worker, h.step) for j, h in self.queue.held.items()}

    def stats(self) -> dict[str, Any]:
        s = self.queue.stats
        return {
            "submitted": len(self.queue.jobs),
            "completed": len(set(s.completions)),
            "duplicate_jobs": len(s.completions) - len(set(s.completions)),
            "lost_jobs": len(self.queue.jobs) - len(self.queue.results),
            "committed_on_notice": s.committed_on_notice,
            "requeued_on_expiry": s.requeued_on_expiry,
            "lost_steps": s.lost_steps,
            "resumed_steps": s.resumed_steps,
            "stale_refused": s.stale_refused,
            "heartbeats": s.heartbeats,
            "sp_regroups": sum(1 for _, order, _, _ in self.sp_done if order == "shrink"),
            "sp_joins": sum(1 for _, order, _, _ in self.sp_done if order == "grow"),
            "sp_regroup_s": [round(sec, 4) for _, order, _, sec in self.sp_done if order == "shrink"],
            "sp_degrees_after": [degree for _, _, degree, _ in self.sp_done],
            "sp_cold_start_s": [round(sec, 4) for _, sec in self.sp_cold],
            "sp_member_nodes": dict(self.sp_member_nodes),
            "sp_recovery_speedup": recovery_speedup(
                [sec for _, sec in self.sp_cold], [sec for _, order, _, sec in self.sp_done if order == "shrink"]
            ),
            "sync_bytes": sum(nbytes for _, _, nbytes, _ in self.synced),
            "sync_full_copies": sum(1 for _, _, _, full in self.synced if full),
            "syncs": len(self.synced),
            "explorer_nodes": sorted({r["node"] for r in self.queue.results.values() if isinstance(r, dict)}),
        }

    def close(self) -> None:
        self.closed = True

    def is_closed(self) -> bool:
        return self.closed
