"""A tick-level model of a spot fleet under a preemption schedule: the pull scheduler against a push baseline.

One tick is one denoising step of one job on one worker. Workers sit in ``slots``; a :class:`Preemption`
(in ticks) gives the slot's worker a notice, removes it ``notice_s`` ticks later, and a replacement joins
the slot ``replacement`` ticks after that.

- **pull**: the real :class:`~rollarc.spotlight.job_queue.JobQueue`. Idle workers pull; each step is a
  heartbeat; a NOTICE makes the worker commit its in-flight progress and leave; a worker removed while
  still holding a lease (no notice, or a notice shorter than a step) loses its steps since the last
  commit, and the job is requeued when the lease expires.
- **push**: jobs are dealt round-robin to slots up front; a slot works through its own list; a lost
  worker's in-flight job restarts from step 0 on the slot's replacement (no queue, no commit), and
  nobody else can take a dead slot's jobs.

The model is used by ``rollarc bench spot`` with a step time measured on the real DiT.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollarc.spotlight.job_queue import Beat, JobQueue, JobSpec, Lease
from rollarc.spotlight.preemption import Preemption


@dataclass(frozen=True)
class FleetResult:
    ticks: int
    completed: int
    submitted: int
    duplicates: int
    lost_steps: int
    work_steps: int

    @property
    def lost_jobs(self) -> int:
        return self.submitted - self.completed

    def throughput(self) -> float:
        """Completed jobs per tick."""
        return self.completed / self.ticks if self.ticks else 0.0


@dataclass
class _Slot:
    alive: bool = True
    noticed_at: int | None = None
    gone_at: int | None = None
    back_at: int | None = None
    generation: int = 0


def _events(preemptions: list[Preemption], replacement: int) -> dict[int, list[tuple[str, int]]]:
    out: dict[int, list[tuple[str, int]]] = {}
    for p in preemptions:
        at, gone = round(p.at_s), round(p.gone_s())
        out.setdefault(at, []).append(("notice", p.slot))
        out.setdefault(gone, []).append(("gone", p.slot))
        out.setdefault(gone + replacement, []).append(("join", p.slot))
    return out


def run_pull(
    jobs: int, steps: int, slots: int, preemptions: list[Preemption], replacement: int, lease: int, max_ticks: int
) -> FleetResult:
    q = JobQueue(lease_s=float(lease))
    for i in range(jobs):
        q.submit(JobSpec(i, f"p{i}", (i,), 0, steps))
    events = _events(preemptions, replacement)
    alive = {s: f"s{s}g0" for s in range(slots)}
    generation = dict.fromkeys(range(slots), 0)
    holding: dict[str, tuple[Lease, int]] = {}
    work = 0
    tick = 0
    while not q.done() and tick < max_ticks:
        for kind, slot in events.get(tick, []):
            name = alive.get(slot)
            if kind == "notice" and name is not None:
                q.notice(name)
            elif kind == "gone" and name is not None:
                holding.pop(name, None)  # whatever it held is lost unless it committed
                del alive[slot]
            elif kind == "join" and slot not in alive:
                generation[slot] += 1
                alive[slot] = f"s{slot}g{generation[slot]}"
        for name in list(alive.values()):
            if name not in holding:
                got = q.pull(name, float(tick))
                if got is None:
                    continue
                holding[name] = (got, got.progress_step)
            lease_, done = holding[name]
            done += 1
            work += 1
            jid = lease_.job.job_id
            if done == steps:
                q.complete(jid, lease_.token, done)
                del holding[name]
                continue
            beat = q.heartbeat(jid, lease_.token, done, float(tick))
            if beat is Beat.NOTICE:
                q.commit(jid, lease_.token, done, done)
                del holding[name]
            elif beat is Beat.LOST:
                del holding[name]
            else:
                holding[name] = (lease_, done)
        tick += 1
        q.expire(float(tick))
    completions = q.stats.completions
    return FleetResult(
        tick, len(set(completions)), jobs, len(completions) - len(set(completions)), q.stats.lost_steps, work
    )


def run_push(
    jobs: int, steps: int, slots: int, preemptions: list[Preemption], replacement: int, max_ticks: int
) -> FleetResult:
    queues = {s: list(range(s, jobs, slots)) for s in range(slots)}
    done_steps = dict.fromkeys(range(slots), 0)
    events = _events(preemptions, replacement)
    alive = dict.fromkeys(range(slots), True)
    completed: list[int] = []
    lost = work = tick = 0
    while len(completed) < jobs and tick < max_ticks:
        for kind, slot in events.get(tick, []):
            if kind == "gone" and alive[slot]:
                alive[slot] = False
                lost += done_steps[slot]
                done_steps[slot] = 0  # the in-flight job restarts from scratch
            elif kind == "join":
                alive[slot] = True
        for slot in range(slots):
            if not alive[slot] or not queues[slot]:
                continue
            done_steps[slot] += 1
            work += 1
            if done_steps[slot] == steps:
                completed.append(queues[slot].pop(0))
                done_steps[slot] = 0
        tick += 1
    return FleetResult(tick, len(set(completed)), jobs, len(completed) - len(set(completed)), lost, work)
