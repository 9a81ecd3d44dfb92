"""The push baseline on Ray: the same spot workers and injector as the pull fleet, jobs pushed by a static plan.

A :class:`~rollarc.diffusion.spot_fleet.SpotFleet` built with ``pull=False`` starts its workers without
their pull loop; :func:`push_all` then hands each slot's worker the jobs that
:class:`~rollarc.spotlight.push_plan.PushPlan` dealt to that slot, one at a time
(``SpotExplorer.run_job``: start to finish, no lease, no heartbeat, no commit). When the injector
removes a node the job in flight fails with the actor and the plan restarts it from step 0 on the
slot's replacement. A notice changes nothing here: a push worker has no queue to commit to. This is
what ``rollarc bench spot`` times against the pull scheduler under the same preemption trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

from rollarc.diffusion.spot_fleet import POLL_S, SpotFleet
from rollarc.spotlight.job_queue import JobSpec
from rollarc.spotlight.push_plan import PushPlan


@dataclass
class PushOutcome:
    results: dict[int, dict[str, Any]]
    restarted: int  # jobs lost in flight and run again from step 0
    completions: int  # completions handed in (more than the jobs would mean a duplicate)


def push_all(fleet: SpotFleet, jobs: list[JobSpec]) -> PushOutcome:
    """Run every job by the static plan on ``fleet``'s workers, replacing lost ones as the fleet does."""
    plan = PushPlan([j.job_id for j in jobs], fleet.slots)
    by_id = {j.job_id: j for j in jobs}
    running: dict[Any, tuple[int, int]] = {}  # ref -> (slot, job id)
    results: dict[int, dict[str, Any]] = {}
    while not plan.done():
        fleet.pump()
        with fleet.lock:
            workers = {slot: n.worker for slot, n in fleet.nodes.items()}
        for slot, worker in workers.items():
            job_id = plan.next_for(slot)
            if job_id is not None:
                running[worker.run_job.remote(by_id[job_id], fleet.noise_level)] = (slot, job_id)
        if not running:
            time.sleep(POLL_S)
            continue
        done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
        for ref in done:
            slot, job_id = running.pop(ref)
            try:
                result = fleet.deadlines.get("call", ref, f"spot slot {slot}'s worker", "run_job")  # ready
            except ray.exceptions.RayActorError:  # its node was removed mid-job
                plan.lost(slot)
                continue
            plan.complete(slot, job_id)
            results[job_id] = result
    return PushOutcome(results, plan.restarted, len(plan.completions))
