"""What every rollout replica records of its work: its token counters and its timeline spans.

The four replicas (``replica_protocol``) keep one of these, so ``stats`` counts tokens and ``drain_spans`` hands
over ``generate`` and ``sync`` spans (``timeline.jsonl``) the same way whichever engine ran the turn.
"""

from __future__ import annotations

import time
from typing import Any

from rollarc.engine.types import Completion
from rollarc.runtime.generate_span import generate_span
from rollarc.runtime.sync_report import sync_span


class ReplicaLog:
    def __init__(self, worker: str, pool: str | None, role: str = "rollout") -> None:
        self.worker = worker
        self.pool = pool
        self.role = role
        self.wall_offset = time.time() - time.perf_counter()  # turns the replica's perf_counter into wall time
        self.spans: list[dict[str, Any]] = []
        self.generated_tokens = 0
        self.prompt_tokens = 0

    def turn(
        self,
        completion: Completion,
        t0: float,
        t1: float,
        cache_key: str | None,
        task: str | None,
        step: int | None,
        batch: int | None = None,
    ) -> None:
        """One finished (or aborted) turn: its tokens counted, its ``generate`` span kept."""
        self.generated_tokens += completion.num_tokens
        self.prompt_tokens += completion.prompt_len
        self.spans.append(
            generate_span(
                worker=self.worker,
                role=self.role,
                pool=self.pool,
                completion=completion,
                t0=t0,
                t1=t1,
                wall_offset=self.wall_offset,
                cache_key=cache_key,
                task=task,
                step=step,
                batch=batch,
            )
        )

    def sync(self, t0: float, t1: float, version: int) -> None:
        """One weight update applied (``sync`` span)."""
        self.spans.append(
            sync_span(worker=self.worker, pool=self.pool, t0=t0, t1=t1, wall_offset=self.wall_offset, version=version)
        )

    def drain(self) -> list[dict[str, Any]]:
        """The spans since the last call."""
        spans, self.spans = self.spans, []
        return spans
