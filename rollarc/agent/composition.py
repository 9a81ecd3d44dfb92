"""What is trained, next to what was admitted: the per-step composition records of ``metrics.jsonl``.

Asynchrony can bias training without failing anything: if the groups that are trained are shorter or less
successful than those admitted, the run learns from a different distribution than it samples. These pure
functions summarise a set of groups (success, length, task) under one prefix, so the admitted, trained,
stale and cancelled sets are written side by side every step, and the per-token staleness of a batch as a
histogram. They take plain trajectories and do no I/O (docs/async.md#what-is-trained-is-visible).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rollarc.agent.trajectory import NO_VERSION, Trajectory
from rollarc.policy.freshness import staleness

# A group: its task and its trajectories (a cancelled group has none, a failed one may have fewer than G).
Group = tuple[str, Sequence[Trajectory]]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def composition(prefix: str, groups: Sequence[Group]) -> dict[str, Any]:
    """``{prefix}_groups_step``, ``_trajectories``, ``_success``, ``_turns``, ``_tokens`` (means per trajectory; None
    without one) and ``_by_task`` (groups per task) of ``groups``."""
    trajs = [t for _, ts in groups for t in ts]
    return {
        f"{prefix}_groups_step": len(groups),
        f"{prefix}_trajectories": len(trajs),
        f"{prefix}_success": _mean([float(t.success) for t in trajs]),
        f"{prefix}_turns": _mean([float(t.num_turns) for t in trajs]),
        f"{prefix}_tokens": _mean([float(t.generated_tokens) for t in trajs]),
        f"{prefix}_by_task": dict(sorted(Counter(task for task, _ in groups).items())),
    }


def token_staleness_hist(train_version: int, trajectories: Sequence[Trajectory]) -> list[int]:
    """Generated tokens by staleness in the step that starts from ``train_version``: entry ``i`` counts the tokens
    ``i`` versions old, up to the oldest (``[]`` when there is no generated token)."""
    lags = Counter(
        staleness(train_version, v) for t in trajectories for seg in t.segments for v in seg.versions if v != NO_VERSION
    )
    return [lags.get(i, 0) for i in range(max(lags) + 1)] if lags else []
