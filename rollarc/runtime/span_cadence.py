"""When the controller collects the workers' spans into ``timeline.jsonl``, so that collecting never delays a step.

A collection asks every worker for its spans and writes them: on short work that is a few thousand spans every
few seconds, 0.1–0.3 s of the controller's loop (docs/performance.md). Collected every 5 s whatever the loop was
doing, it landed between two phases of a synchronous step (between a weight swap and the next admission, or
between a publish and the swap) about once every 5 s and stalled that step by as much.

Synchronous mode has windows where nothing waits on the loop: while the trainer trains, the rollout side is idle
and the next event is the step's answer. So it collects every worker but the trainer once per step in that
window, and the trainer's own spans (two a step) while the rollout runs, when the trainer is idle, at most every
``EVERY_S``. Asynchronous modes have no such window: every ``EVERY_S``, everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

EVERY_S = 5.0


class Collect(Enum):
    NOTHING = "nothing"
    ALL = "all"
    WORKERS = "workers"  # every worker but the trainer (it is training)
    TRAINER = "trainer"  # the trainer only (the rollout runs; the trainer is idle)


@dataclass
class SpanCadence:
    synchronous: bool
    last_s: float  # when everything (async) or the trainer (sync) was last collected
    collected_version: int | None = None  # sync: the version whose training window has been used

    def due(self, now: float, version: int, training: bool, rollout_only: bool) -> Collect:
        """What to collect now. ``training``: a train step is in flight; ``rollout_only``: groups are running and
        nothing else is (no train step, publish or weight sync), so the trainer is idle."""
        if not self.synchronous:
            if now - self.last_s > EVERY_S:
                self.last_s = now
                return Collect.ALL
            return Collect.NOTHING
        if training and self.collected_version != version:
            self.collected_version = version
            return Collect.WORKERS
        if rollout_only and now - self.last_s > EVERY_S:
            self.last_s = now
            return Collect.TRAINER
        return Collect.NOTHING
