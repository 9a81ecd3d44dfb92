"""Time to a target: how long each mode trains before held-out success first reaches a common bar.

Throughput alone flatters asynchrony, since stale tokens may learn less per step; this measures what a user
waits for. Pure functions over a run's own records (``summary.json`` and ``metrics.jsonl``), no I/O:

- A run's **success curve** is ``(t, success)`` per held-out evaluation: before RL at ``t = 0``, after each
  evaluated step, and after the last step. ``t`` is the RL wall time at the end of that step (the step's
  ``wall_s`` minus the RL start) less the seconds the run paused for held-out evaluations before it: the
  controller pauses for an evaluation in every mode alike, so evaluations are not counted as training time. A
  deferred evaluation (``train.eval_deferred``) pauses the run where it is scored (``scored_at``), not at its step
  (``pauses``).
- The **target** is fixed before the runs (``rollarc bench async --target``). Only as a labelled fallback
  (``select_target``) is it set after them by synchronous mode: ``s0 + fraction * (p - s0)``, where ``s0`` is the held-out
  success before RL (the shared SFT start) and ``p`` the lowest, over the synchronous seeds, of a run's best
  success. So every synchronous seed reaches it within its budget; with ``fraction < 1`` it sits below the
  noisy peaks. When synchronous training never rose above ``s0`` there is no target (``None``).
- A run's **time to target** is the first ``t`` whose success is at least the target, or ``None`` if the run
  never reached it within its steps. A median over seeds counts ``None`` as infinite, so a mode that misses
  in most seeds has an infinite median and its speed-up is ``None``, never a made-up number.
- The target's **noise**: two standard errors of the starting estimate (``estimate_noise``). A target no
  further than that from ``s0`` says little about quality, and the benchmark says so.

Between two evaluations the curve is unknown, so a first crossing read off the evaluation grid is late by up
to one evaluation interval, and a ratio of two such times can move by far more than its mode's effect
(``rollarc bench async``, 2026-12-03: 1.74x to 2.35x at one evaluation every 10 steps). ``crossing`` therefore
interpolates: the crossing time is the linear interpolation of RL wall time between the last evaluation below
the target and the first at or above it, and it carries those two evaluations' times as its **bounds** (the
crossing lies between them). ``ratio_with_bounds`` carries the bounds into a ratio of medians (the median is
monotone in every seed's time, so the extreme ratios are the medians of the bounds), and ``grid_error`` is the
largest relative width of the reported ratios' intervals: how much the grid alone could still move a figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Curve = list[tuple[float, float]]  # (seconds of RL wall time, held-out success), in time order


def success_curve(summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> Curve:
    """The run's held-out success against its RL wall time (evaluation time excluded)."""
    return [(t, success) for t, success, _ in _evaluations(summary, rows)]


def eval_steps(summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[int]:
    """The training step of each point of ``success_curve`` (0 before RL)."""
    return [step for _, _, step in _evaluations(summary, rows)]


def pauses(summary: dict[str, Any]) -> dict[int, float]:
    """Seconds the run paused for held-out evaluations after each version (within RL: neither before it nor
    after the last step): a live evaluation after its own step, a deferred one where it was scored."""
    last = max((int(e["version"]) for e in summary["evals"]), default=0)
    paused: dict[int, float] = {}
    for evaluation in summary["evals"]:
        at = int(evaluation.get("scored_at", evaluation["version"]))
        if 0 < at < last and evaluation["label"] not in ("before_rl", "after_rl"):
            paused[at] = paused.get(at, 0.0) + float(evaluation.get("seconds", 0.0))
    return paused


def _evaluations(summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[tuple[float, float, int]]:
    rl_start = float(summary["rl_window"][0])
    end_of_step = {int(r["step"]): float(r["wall_s"]) - rl_start for r in rows}
    paused = pauses(summary)
    curve: list[tuple[float, float, int]] = []
    for evaluation in sorted(summary["evals"], key=lambda e: (int(e["version"]), e["label"] == "after_rl")):
        version = int(evaluation["version"])
        if evaluation.get("episodes", 0) == 0 or not math.isfinite(float(evaluation["success"])):
            continue
        t = 0.0 if version == 0 else end_of_step.get(version)
        if t is None:
            continue  # an evaluation of a step the metrics do not hold (e.g. before a resume)
        eval_s = sum(seconds for at, seconds in paused.items() if at < version)
        curve.append((max(0.0, t - eval_s), float(evaluation["success"]), version))
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


@dataclass(frozen=True)
class Crossing:
    """Where a run's held-out success first reached the target: ``t`` interpolated, within ``[lo, hi]``.

    ``lo`` is the time of the last evaluation below the target and ``hi`` that of the first at or above it
    (``lo == hi == t`` when the first evaluation already reached it); ``index`` is that evaluation's place
    in the curve (its step, for a caller that keeps the steps)."""

    t: float
    lo: float
    hi: float
    index: int


def crossing(curve: Curve, target: float) -> Crossing | None:
    """The interpolated first crossing of ``target`` with its bounds; ``None`` if the curve never reaches it."""
    previous: tuple[float, float] | None = None
    for index, (t, success) in enumerate(curve):
        if success >= target:
            if previous is None:
                return Crossing(t, t, t, index)
            t0, s0 = previous  # s0 < target <= success, so the slope is positive
            return Crossing(t0 + (target - s0) / (success - s0) * (t - t0), t0, t, index)
        previous = (t, success)
    return None


def _median_of(crossings: Sequence[Crossing | None], field: str) -> float:
    return median_time([None if c is None else float(getattr(c, field)) for c in crossings])


@dataclass(frozen=True)
class Ratio:
    """A ratio of median times to target, ``base / other``, and the interval the evaluation grid leaves it in
    (``hi`` is ``None`` when unbounded: the other mode may have crossed at any time after its start)."""

    value: float
    lo: float
    hi: float | None

    @property
    def relative_width(self) -> float | None:
        """``(hi - lo) / value``; ``None`` when the interval is unbounded."""
        return None if self.hi is None else (self.hi - self.lo) / self.value


def ratio_with_bounds(base: Sequence[Crossing | None], other: Sequence[Crossing | None]) -> Ratio | None:
    """Median time to target of ``base`` over that of ``other``, with its grid bounds; ``None`` when either
    median is infinite (its median seed never reached the target) or ``other``'s is 0."""
    base_t, other_t = _median_of(base, "t"), _median_of(other, "t")
    if math.isinf(base_t) or math.isinf(other_t) or other_t <= 0.0:
        return None
    other_lo = _median_of(other, "lo")
    lo = _median_of(base, "lo") / _median_of(other, "hi")
    hi = None if other_lo <= 0.0 else _median_of(base, "hi") / other_lo
    return Ratio(base_t / other_t, lo, hi)


def grid_error(ratios: Sequence[Ratio]) -> float | None:
    """The largest relative width over ``ratios``; ``None`` when one is unbounded or there are none."""
    widths = [r.relative_width for r in ratios]
    if not widths or any(w is None for w in widths):
        return None
    return max(w for w in widths if w is not None)


def strongest(crossings: Mapping[str, Sequence[Crossing | None]]) -> str | None:
    """The mode with the least median time to target (the first listed on a tie); ``None`` when no mode's
    median seed reached it."""
    medians = {label: _median_of(runs, "t") for label, runs in crossings.items()}
    finite = [label for label, m in medians.items() if not math.isinf(m)]
    return min(finite, key=lambda label: medians[label]) if finite else None


def eval_pause_gain(summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> float | None:
    """Seconds a step right after a held-out evaluation was shorter (its evaluation's seconds taken out) than
    the run's other steps, medians; ``None`` without both kinds of step.

    An evaluation pauses the controller, and its seconds are left out of RL wall time; but an asynchronous
    run's groups already in flight keep running through it, so the step after it may be shorter: work
    done in time that is not counted. A gain near 0 says the exclusion is fair; a positive gain times the
    evaluations before a crossing bounds the credit a mode got from evaluating often."""
    paused = pauses(summary)
    ends = {int(r["step"]): float(r["wall_s"]) for r in rows}
    after, other = [], []
    for step in sorted(ends):
        if step - 1 not in ends:
            continue
        took = ends[step] - ends[step - 1]
        if step - 1 in paused:
            after.append(took - paused[step - 1])
        else:
            other.append(took)
    if not after or not other:
        return None
    return float(statistics.median(other) - statistics.median(after))
