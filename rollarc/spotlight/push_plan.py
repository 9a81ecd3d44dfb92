"""The push baseline's pure core: jobs dealt to workers up front, a lost job restarted from step 0.

A push scheduler decides where every job runs before any runs: job ``i`` goes to slot ``i mod slots``
(round-robin, the same deal as the tick model's push in ``fleet_sim``), and each slot works through its
own list in order. Nothing is leased, nothing is committed: when a slot's worker is lost, the job it
was running is restarted from step 0 by the slot's replacement, and no other worker may take a dead
slot's jobs, which is what the pull scheduler (``job_queue``) is measured against on the same Ray
actors (``rollarc.diffusion.push_fleet``, ``rollarc bench spot``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class PushPlan:
    """Each slot's list of job ids, the job each slot runs now, completions and restarts."""

    def __init__(self, job_ids: Sequence[int], slots: int):
        if slots < 1:
            raise ValueError(f"a push plan needs at least one slot, got {slots}")
        self.lists: dict[int, deque[int]] = {s: deque(job_ids[s::slots]) for s in range(slots)}
        self.running: dict[int, int | None] = dict.fromkeys(range(slots))
        self.completions: list[int] = []
        self.restarted = 0  # jobs lost in flight and started again from step 0

    def next_for(self, slot: int) -> int | None:
        """The job ``slot``'s worker should run now (its list's head), or None (busy, or its list is done)."""
        if self.running[slot] is not None or not self.lists[slot]:
            return None
        self.running[slot] = self.lists[slot][0]
        return self.running[slot]

    def complete(self, slot: int, job_id: int) -> None:
        if self.running[slot] != job_id:
            raise ValueError(f"slot {slot} is not running job {job_id} (it runs {self.running[slot]})")
        self.lists[slot].popleft()
        self.running[slot] = None
        self.completions.append(job_id)

    def lost(self, slot: int) -> None:
        """The slot's worker is gone: its job (if any) stays first in its list, to start over from step 0."""
        if self.running[slot] is not None:
            self.restarted += 1
        self.running[slot] = None

    def done(self) -> bool:
        return not any(self.lists.values())
