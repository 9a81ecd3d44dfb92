"""What one training step writes to ``metrics.jsonl``: the trained batch's statistics and the step's record.

Pure functions of what the controller measured, apart from the step loop that measures it, so the record's
keys (which ``rollarc report`` and the benchmarks read) are defined in one place.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from rollarc.agent.composition import Group, composition, token_staleness_hist
from rollarc.agent.trajectory import Trajectory, batch_digest
from rollarc.policy.freshness import staleness as trained_staleness
from rollarc.report.metrics import process_rss_mb
from rollarc.runtime.env_worker import GroupResult
from rollarc.runtime.run_counters import Counters

# The trainer's scalars that the record already holds under its own keys (or that are not per-step metrics).
NOT_STEP_METRICS = {"version", "tokens", "train_s", "rss_mb", "loss", "grad_norm", "clip_frac", "entropy"}


def since_step_info(stale: list[GroupResult], finished: list[Group], cancelled: list[Group]) -> dict[str, Any]:
    """What happened to the other groups since the last batch, to set the trained batch against: the admitted
    groups whose rollouts ended (trained later or not), those dropped or restarted as stale, those cancelled."""
    return {
        **composition("admitted", finished),
        **composition("stale", [(g.spec.task, g.trajectories) for g in stale]),
        **composition("cancelled", cancelled),
    }


def batch_info(batch: list[GroupResult], train_version: int, since_step: dict[str, Any]) -> dict[str, Any]:
    """The trained batch: rewards, lengths, staleness and task mix, with ``since_step`` (:func:`since_step_info`)."""
    trajs = [t for g in batch for t in g.trajectories]
    staleness = [trained_staleness(train_version, t.min_version) for t in trajs]
    per_task: dict[str, list[Trajectory]] = {}
    for t in trajs:
        per_task.setdefault(t.task, []).append(t)
    return {
        "train_version": train_version,
        "batch_digest": batch_digest(trajs),
        "trajectories": len(trajs),
        "reward": float(np.mean([t.reward for t in trajs])),
        "success": float(np.mean([t.success for t in trajs])),
        "turns": float(np.mean([t.num_turns for t in trajs])),
        "invalid_actions": float(np.mean([t.invalid_actions for t in trajs])),
        "tool_calls": float(np.mean([t.tool_calls for t in trajs])),
        "tool_errors": float(np.mean([t.tool_errors for t in trajs])),
        "generated_tokens": int(sum(t.generated_tokens for t in trajs)),
        "prompt_tokens": int(sum(t.prompt_tokens for t in trajs)),
        "cached_tokens": int(sum(t.cached_tokens for t in trajs)),
        "staleness_hist": {str(k): int(v) for k, v in sorted(Counter(staleness).items())},
        "staleness_max": int(max(staleness)),
        "token_staleness_hist": token_staleness_hist(train_version, trajs),
        "resumed_turns": int(sum(t.resumed_turns for t in trajs)),
        "resumed_tokens": int(sum(t.resumed_tokens for t in trajs)),
        **composition("trained", [(g.spec.task, g.trajectories) for g in batch]),
        **since_step,
        "per_task": {
            name: {
                "success": float(np.mean([t.success for t in ts])),
                "reward": float(np.mean([t.reward for t in ts])),
                "trajectories": len(ts),
            }
            for name, ts in per_task.items()
        },
    }


def step_record(
    version: int,
    train: dict[str, Any],
    batch: dict[str, Any],
    step_time: float,
    sync_time: float,
    busy_time: float,
    *,
    run_start: float,
    sync_bytes: int,
    buffer_groups: int,
    in_flight_groups: int,
    rollout_rss: list[float],
    env_rss: list[float],
    counters: Counters,
) -> dict[str, Any]:
    """One line of ``metrics.jsonl``: timings, throughput, memory, the batch, the loss and the run's counters."""
    tokens = batch["generated_tokens"]
    return {
        "version": version,
        "wall_s": time.time() - run_start,
        "step_time_s": step_time,
        "train_s": train.get("train_s", 0.0),
        "sync_s": sync_time,
        "train_sync_s": busy_time,
        "sync_bytes": sync_bytes,
        "tokens": train.get("tokens", 0),
        "gen_tok_s": tokens / step_time if step_time > 0 else 0.0,
        "trajectories_per_s": batch["trajectories"] / step_time if step_time > 0 else 0.0,
        "buffer_groups": buffer_groups,
        "in_flight_groups": in_flight_groups,
        "rss_mb": process_rss_mb(),
        "rss_mb_train": train.get("rss_mb", 0.0),
        "rss_mb_rollout": max(rollout_rss, default=0.0),
        "rss_mb_env": max(env_rss, default=0.0),
        **{k: v for k, v in batch.items()},
        "loss": train.get("loss"),
        "grad_norm": train.get("grad_norm"),
        "clip_frac": train.get("clip_frac"),
        "entropy": train.get("entropy"),
        **{k: v for k, v in counters.as_dict().items() if k not in ("failure_reasons", "failure_examples")},
        # every other scalar the trainer reports (token staleness, lr, rows, ...) reaches metrics.jsonl too
        **{k: v for k, v in train.items() if k not in NOT_STEP_METRICS and isinstance(v, int | float)},
    }


def mean_dicts(items: list[dict[str, float]]) -> dict[str, float]:
    """The key-wise mean of dicts with the same keys (``{}`` for none)."""
    if not items:
        return {}
    return {key: float(np.mean([d[key] for d in items])) for key in items[0]}
