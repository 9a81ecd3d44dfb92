"""The driver's copy of what the spot queue must hold, so that a queue actor Ray restarted empty can be refilled.

The queue (``SpotQueue``) is the one place that knows the exploration jobs, their leases and results, and the
weight references workers fetch. Ray restarts it when its process dies (``max_restarts``), but empty. The
fleet records here every job it launched, every result it collected and the last two weight versions it put;
when it sees a new incarnation of the queue it puts those weights back and submits again every launched job
not yet collected (a result the old queue held but had not handed over is redone: ``redone_on_queue_loss``).
The counts a dead incarnation had reached (as last read) are kept and added to the new one's, and the job
ledger (launched, collected) is the fleet's own, so ``lost_jobs`` still counts every job never handed back.
Pure: a unit test drives it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollarc.spotlight.job_queue import JobSpec

# the queue's counters that add up over its incarnations
SUMMED = (
    "committed_on_notice",
    "requeued_on_expiry",
    "lost_steps",
    "resumed_steps",
    "stale_refused",
    "heartbeats",
    "sync_bytes",
    "sync_full_copies",
    "syncs",
    "duplicate_jobs",
)


@dataclass
class QueueLedger:
    jobs: dict[int, JobSpec] = field(default_factory=dict)  # every job launched
    collected: set[int] = field(default_factory=set)  # jobs whose results the controller got
    weights: dict[int, tuple[int | None, list[Any]]] = field(default_factory=dict)  # the last two versions put
    retired: Counter[str] = field(default_factory=Counter)  # counts of dead incarnations, as last read
    last: dict[str, Any] = field(default_factory=dict)  # the live incarnation's stats, as last read
    restarts: int = 0
    redone: int = 0

    def launched(self, jobs: list[JobSpec]) -> None:
        for job in jobs:
            self.jobs[job.job_id] = job

    def put(self, version: int, base: int | None, refs: list[Any]) -> None:
        self.weights[version] = (base, refs)
        for old in [v for v in self.weights if v < version - 1]:
            del self.weights[old]

    def read(self, stats: dict[str, Any]) -> dict[str, Any]:
        """The queue's ``stats`` over every incarnation: with none lost, its own; after a restart the counts
        summed, and the jobs from this ledger (``lost_jobs``: launched and never collected, so meaningful once
        every launched round was waited for, as at the end of a run)."""
        self.last = dict(stats)
        out = {**stats, "queue_restarts": self.restarts, "redone_on_queue_loss": self.redone}
        if not self.restarts:
            return out
        for key in SUMMED:
            out[key] = int(stats.get(key, 0)) + self.retired[key]
        out.update(
            submitted=len(self.jobs),
            completed=len(self.collected),
            lost_jobs=len(self.jobs) - len(self.collected),
        )
        return out

    def restarted(self) -> tuple[list[tuple[int, int | None, list[Any]]], list[JobSpec]]:
        """A new incarnation: what to put back into it, weights first, then the jobs not collected."""
        self.restarts += 1
        self.retired.update({key: int(self.last.get(key, 0)) for key in SUMMED})
        self.last = {}
        jobs = [job for job_id, job in sorted(self.jobs.items()) if job_id not in self.collected]
        self.redone += len(jobs)
        return [(version, base, refs) for version, (base, refs) in sorted(self.weights.items())], jobs
