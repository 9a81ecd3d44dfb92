"""The ``generate`` span of one turn, as every rollout replica writes it into ``timeline.jsonl``.

A dedicated :class:`~rollarc.runtime.rollout_worker.RolloutWorker` and a borrowed
:class:`~rollarc.runtime.coserving_replica.CoServingReplica` build it here, so ``rollarc report``'s timeline
and bubble fractions count borrowed capacity exactly as dedicated capacity (a lane per replica, its role
``rollout`` or ``borrowed``). Pure: a unit test calls it.
"""

from __future__ import annotations

from typing import Any

from rollarc.engine.types import Completion


def generate_span(
    *,
    worker: str,
    role: str,
    pool: str | None,
    completion: Completion,
    t0: float,
    t1: float,
    wall_offset: float,
    cache_key: str | None,
    task: str | None,
    step: int | None,
    batch: int | None = None,
) -> dict[str, Any]:
    """``t0``/``t1`` on the replica's ``time.perf_counter`` clock; ``wall_offset`` turns them into wall time.

    The turn ends at the engine's ``finish_time`` when it has one (not when the caller got the result).
    ``batch``: the rollout turns the replica was running when this one arrived (None: not known).
    """
    span: dict[str, Any] = {
        "worker": worker,
        "role": role,
        "kind": "generate",
        "t0": t0 + wall_offset,
        "t1": (completion.finish_time if completion.finish_time else t1) + wall_offset,
        "traj": cache_key,
        "task": task,
        "step": step,
        "prompt_tokens": completion.prompt_len,
        "new_tokens": completion.num_tokens,
        "cached_tokens": completion.cached_prompt_tokens,
        "pool": pool,
    }
    if batch is not None:
        span["batch"] = batch
    return span
