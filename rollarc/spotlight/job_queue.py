"""The pull scheduler's pure core: a job queue with leases, heartbeats, in-flight commits and fencing.

Spot workers *pull* jobs (a sampling or exploration job: prompt, seeds, weight version, denoising steps)
instead of being handed them, so a worker that vanishes only ever holds what it pulled. Each pull grants a
lease that the worker renews by heartbeats; three things can end it:

- **complete**: the worker hands in the result; the job is done, exactly once.
- **commit** (on a preemption notice): the worker hands in its in-flight progress (an opaque value: the
  latent, its step index and RNG state); the job goes back to the *front* of the queue carrying it, and
  the next worker resumes from there instead of from step 0.
- **expiry** (lost without notice): no heartbeat for ``lease_s``; the job goes back to the queue with
  the last progress committed for it (if any), and the steps done since are counted as lost work.

Every lease carries a fencing token (a counter bumped at each grant). A late ``complete``, ``commit`` or
``heartbeat`` under an old token is refused, so a worker that was presumed dead and comes back cannot
complete a job twice. A worker whose node the fleet has removed (``gone``) is fenced too: nothing more is
accepted from it, even under a lease still valid, because a process can outlive its removed node for a
moment; its leases run out and its jobs are redone, as for any loss without notice. Time is passed in (``now``), never read, so the core is deterministic and tested
with random kills (tests/unit/test_spot_job_queue.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True)
class JobSpec:
    """One unit of sampling or exploration work: a prompt's seeds under one weight version."""

    job_id: int
    prompt: str
    seeds: tuple[int, ...]
    version: int
    steps: int


@dataclass(frozen=True)
class Lease:
    """What a pull returns: the job, its fencing token, and the progress to resume from (None: step 0)."""

    job: JobSpec
    token: int
    worker: str
    progress: object | None
    progress_step: int


class Beat(Enum):
    """A heartbeat's answer: keep going, commit now (a preemption notice), or stop (the lease is gone)."""

    OK = "ok"
    NOTICE = "notice"
    LOST = "lost"


@dataclass
class _Held:
    lease: Lease
    expires: float
    step: int  # denoising steps the worker reported done (for lost-work accounting)


@dataclass
class QueueStats:
    committed_on_notice: int = 0
    requeued_on_expiry: int = 0
    stale_refused: int = 0
    lost_steps: int = 0
    resumed_steps: int = 0
    heartbeats: int = 0  # answered under a current lease (the round trips a worker paid for)
    completions: list[int] = field(default_factory=list)


class JobQueue:
    """FIFO of pending jobs, leased jobs by id, and results; see the module docstring."""

    def __init__(self, lease_s: float):
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        self.lease_s = lease_s
        self.pending: deque[int] = deque()
        self.jobs: dict[int, JobSpec] = {}
        self.progress: dict[int, tuple[object, int]] = {}
        self.held: dict[int, _Held] = {}
        self.results: dict[int, object] = {}
        self.noticed: set[str] = set()
        self.gone_workers: set[str] = set()
        self.stats = QueueStats()
        self._token = 0

    # --- producer --------------------------------------------------------------------------------
    def submit(self, job: JobSpec) -> None:
        if job.job_id in self.jobs:
            raise ValueError(f"job {job.job_id} was already submitted")
        self.jobs[job.job_id] = job
        self.pending.append(job.job_id)

    def done(self) -> bool:
        return len(self.results) == len(self.jobs)

    # --- workers ---------------------------------------------------------------------------------
    def pull(self, worker: str, now: float) -> Lease | None:
        """The next job under a fresh lease, or None (queue empty, or this worker is under notice)."""
        self.expire(now)
        if worker in self.noticed or worker in self.gone_workers or not self.pending:
            return None
        job_id = self.pending.popleft()
        self._token += 1
        progress, step = self.progress.get(job_id, (None, 0))
        lease = Lease(self.jobs[job_id], self._token, worker, progress, step)
        self.held[job_id] = _Held(lease, now + self.lease_s, step)
        self.stats.resumed_steps += step
        return lease

    def heartbeat(self, job_id: int, token: int, step: int, now: float) -> Beat:
        """Renew the lease and record ``step`` done; NOTICE asks the worker to commit and stop."""
        held = self._current(job_id, token)
        if held is None:
            return Beat.LOST
        held.expires, held.step = now + self.lease_s, step
        self.stats.heartbeats += 1
        return Beat.NOTICE if held.lease.worker in self.noticed else Beat.OK

    def complete(self, job_id: int, token: int, result: object) -> bool:
        """Hand in the result; False (and nothing recorded) if the lease is no longer this token's."""
        if self._current(job_id, token) is None:
            return False
        del self.held[job_id]
        self.progress.pop(job_id, None)
        self.results[job_id] = result
        self.stats.completions.append(job_id)
        return True

    def commit(self, job_id: int, token: int, progress: object, step: int) -> bool:
        """On notice: keep the in-flight ``progress`` (``step`` steps done) and requeue the job at the front."""
        if self._current(job_id, token) is None:
            return False
        del self.held[job_id]
        self.progress[job_id] = (progress, step)
        self.pending.appendleft(job_id)
        self.stats.committed_on_notice += 1
        return True

    # --- the preemption side ---------------------------------------------------------------------
    def notice(self, worker: str) -> None:
        """A preemption notice for ``worker``: its next heartbeat says NOTICE and it pulls nothing more."""
        self.noticed.add(worker)

    def gone(self, worker: str) -> None:
        """``worker``'s node was removed: accept nothing more from it (see the module docstring)."""
        self.gone_workers.add(worker)

    def expire(self, now: float) -> list[int]:
        """Requeue every job whose lease ran out (its worker vanished without notice); returns their ids."""
        gone = [job_id for job_id, h in self.held.items() if h.expires <= now]
        for job_id in gone:
            held = self.held.pop(job_id)
            self.stats.lost_steps += held.step - self.progress.get(job_id, (None, 0))[1]
            self.stats.requeued_on_expiry += 1
            self.pending.appendleft(job_id)
        return gone

    def _current(self, job_id: int, token: int) -> _Held | None:
        held = self.held.get(job_id)
        if held is None or held.lease.token != token or held.lease.worker in self.gone_workers:
            self.stats.stale_refused += 1
            return None
        return held
