"""What a rollout replica reports of one weight update: its ``sync`` span and the timings the controller reads.

Every replica kind (the built-in engine's :class:`~rollarc.runtime.rollout_worker.RolloutWorker`, the vLLM and
OpenAI-compatible replicas) builds both here, so ``timeline.jsonl`` and ``metrics.jsonl`` read the same keys
whichever engine ran the update. Pure: a unit test calls it.
"""

from __future__ import annotations

from typing import Any

from rollarc.report.metrics import process_rss_mb


def sync_span(
    *, worker: str, pool: str | None, t0: float, t1: float, wall_offset: float, version: int
) -> dict[str, Any]:
    """``t0``/``t1`` on the replica's ``time.perf_counter`` clock; ``wall_offset`` turns them into wall time."""
    return {
        "worker": worker,
        "role": "rollout",
        "kind": "sync",
        "t0": t0 + wall_offset,
        "t1": t1 + wall_offset,
        "version": version,
        "pool": pool,
    }


def sync_timings(
    *, fetch_s: float, apply_s: float, total_s: float, nbytes: float, model_bytes: float
) -> dict[str, float]:
    """The seconds spent fetching and applying, the update's bytes, and this process's resident memory after it."""
    return {
        "fetch_s": fetch_s,
        "apply_s": apply_s,
        "total_s": total_s,
        "bytes": float(nbytes),
        "model_bytes": float(model_bytes),
        "rss_mb": process_rss_mb(),
    }
