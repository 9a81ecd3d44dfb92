"""Time to a target: how long each mode trains before held-out success first reaches a common bar.

Throughput alone flatters asynchrony, since stale tokens may learn less per step; this measures what a user
waits for. Pure functions over a run's own records (``summary.json`` and ``metrics.jsonl``), no I/O:

- A run's **success curve** is ``(t, success)`` per held-out evaluation: before RL at ``t = 0``, after each
  evaluated step, and after the last step. ``t`` is the RL wall time at the end of that step (the step's
  ``wall_s`` minus the RL start) less the seconds spent in the held-out evaluations before it: the controller
  pauses for an evaluation in every mode alike, so evaluations are not counted as training time.
- The **target** is set by synchronous mode: ``s0 + fraction * (p - s0)``, where ``s0`` is the held-out
  success before RL (the shared SFT start) and ``p`` the lowest, over the synchronous seeds, of a run's best
  success. So every synchronous seed reaches it within its budget; with ``fraction < 1`` it sits below the
  noisy peaks. When synchronous training never rose above ``s0`` there is no target (``None``).
- A run's **time to target** is the first ``t`` whose success is at least the target, or ``None`` if the run
  never reached it within its steps. A median over seeds counts ``None`` as infinite, so a mode that misses
  in most seeds has an infinite median and its speed-up is ``None``, never a made-up number.
- The target's **noise**: two standard errors of the starting estimate (``estimate_noise``). A target no
  further than that from ``s0`` says little about quality, and the benchmark says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

Curve = list[tuple[float, float]]  # (seconds of RL wall time, held-out success), in time order


def success_curve(summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> Curve:
    """The run's held-out success against its RL wall time (evaluation time excluded)."""
    rl_start = float(summary["rl_window"][0])
    end_of_step = {int(r["step"]): float(r["wall_s"]) - rl_start for r in rows}
    curve: Curve = []
    eval_s = 0.0
    for evaluation in sorted(summary["evals"], key=lambda e: (int(e["version"]), e["label"] == "after_rl")):
        version = int(evaluation["version"])
        if evaluation.get("episodes", 0) == 0 or not math.isfinite(float(evaluation["success"])):
            continue
        t = 0.0 if version == 0 else end_of_step.get(version)
        if t is None:
            continue  # an evaluation of a step the metrics do not hold (e.g. before a resume)
        curve.append((max(0.0, t - eval_s), float(evaluation["success"])))
        if version > 0 and evaluation["label"] != "after_rl":
            eval_s += float(evaluation.get("seconds", 0.0))
    return curve


def estimate_noise(success: float, episodes: int) -> float:
    """Two standard errors of a held-out success estimated from ``episodes`` independent episodes: a target
    closer than this to the start is reached by a lucky evaluation as often as by learning."""
    if episodes < 1 or not 0.0 <= success <= 1.0:
        raise ValueError(f"need episodes >= 1 and a success in [0, 1] (got {episodes}, {success})")
    return 2.0 * math.sqrt(success * (1.0 - success) / episodes)


def select_target(start_success: float, sync_curves: Sequence[Curve], fraction: float = 0.8) -> float | None:
    """The bar every synchronous seed reaches: ``s0 + fraction * (p - s0)``; ``None`` if sync never improved."""
    if not sync_curves or not 0.0 < fraction <= 1.0:
        raise ValueError(f"need synchronous curves and 0 < fraction <= 1 (got {len(sync_curves)}, {fraction})")
    peaks = [max((s for _, s in curve), default=float("-inf")) for curve in sync_curves]
    lowest_peak = min(peaks)
    if not lowest_peak > start_success:
        return None
    return start_success + fraction * (lowest_peak - start_success)


def first_crossing(curve: Curve, target: float) -> float | None:
    """The first time the curve's success is at least ``target``; ``None`` if it never is."""
    for t, success in curve:
        if success >= target:
            return t
    return None


def median_time(times: Sequence[float | None]) -> float:
    """Median over seeds, a seed that never reached the target counting as infinite."""
    if not times:
        raise ValueError("median_time of no runs")
    return float(statistics.median([math.inf if t is None else t for t in times]))


def speedup(sync_times: Sequence[float | None], other_times: Sequence[float | None]) -> float | None:
    """Ratio of medians, sync over the other mode; ``None`` when either median is infinite (not reached)."""
    sync_median, other_median = median_time(sync_times), median_time(other_times)
    if math.isinf(sync_median) or math.isinf(other_median) or other_median <= 0.0:
        return None
    return sync_median / other_median


def spread(times: Sequence[float | None]) -> list[float | None]:
    """``[min, max]`` over seeds (``None`` stands for a seed that never reached the target)."""
    reached = [t for t in times if t is not None]
    if not reached:
        return [None, None]
    return [min(reached), max(reached) if len(reached) == len(times) else None]
