"""The figures of ``rollarc bench rose --train`` from its runs' records: pure functions, no I/O.

Each seed trains the harvest config twice from one warm start, as configured and with ``harvest.lend=false`` (the
same serving, nothing borrowed). What
the two runs are compared on:

- **time to target**: each run's first crossing of the target, interpolated between the evaluation before it
  and the first at or above it, which bound it (``rollarc.bench.time_to_target.crossing``); the speed-up is the
  median time alone over the median time with harvest, with the interval the evaluation grid leaves it in
  (``ratio_with_bounds``), per seed and over the seeds (``speedup``).
- **serving attainment**, pooled over seeds by request count (``pooled_attainment``): the requests served after the
  calibration in the run that borrows against those in the run that does not, each against its run's derived SLO.
- **guard actions by cause**, summed over seeds (``summed_actions``); the SLO-caused ones are ``SLO_CAUSES``.

A figure a run did not record stays ``None``; nothing here fills one in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollarc.bench.time_to_target import Crossing, ratio_with_bounds

# The guard's decisions taken for the SLO (docs/rose.md): pauses and preemptions the guard asked for, and
# withdrawals of a lent replica that reported no headroom. Memory- and slot-blocked ones are counted apart.
SLO_CAUSES = ("slo_pauses", "slo_preemptions", "withdrawals")
GOAL_SPEEDUP = 1.3  # time to target with borrowed capacity, median over seeds
GOAL_ATTAINMENT_DROP = 0.005  # serving attainment during training at most 0.5 points below serving alone
GRID_TOLERANCE = 0.10  # the held-out grid may leave the speed-up an interval at most this wide (relative)


def seed_target(start_success: float, target: float | None, gain: float) -> float:
    """The held-out success a run must reach: ``target`` when given, else ``gain`` above the warm start's."""
    return float(target) if target is not None else start_success + gain


def speedup(alone: Sequence[Crossing | None], harvest: Sequence[Crossing | None]) -> dict[str, Any]:
    """Median time to target alone over with harvest (interpolated crossings), the interval the held-out grid
    leaves it in (``high`` ``None``: unbounded), its relative width and whether that is within ``GRID_TOLERANCE``.
    One seed's: pass one crossing each. All ``None`` when either median run missed the target."""
    ratio = ratio_with_bounds(alone, harvest)
    if ratio is None:
        return {"speedup": None, "low": None, "high": None, "grid_rel": None, "within_tolerance": False}
    width = ratio.relative_width
    return {
        "speedup": ratio.value,
        "low": ratio.lo,
        "high": ratio.hi,
        "grid_rel": width,
        "within_tolerance": width is not None and width <= GRID_TOLERANCE,
    }


def pooled_attainment(parts: Sequence[tuple[int, float] | None]) -> float | None:
    """Attainment over every seed's requests: ``sum(requests * attainment) / sum(requests)`` of the
    ``(requests, attainment)`` pairs; ``None`` if a seed lacks one or there were no requests."""
    if not parts or any(p is None for p in parts):
        return None
    requests = sum(int(p[0]) for p in parts if p is not None)
    if requests == 0:
        return None
    return sum(int(p[0]) * float(p[1]) for p in parts if p is not None) / requests


def summed_actions(per_seed: Sequence[Mapping[str, int] | None]) -> dict[str, int] | None:
    """Guard actions by cause summed over seeds; ``None`` if a seed's run did not record them."""
    if not per_seed or any(p is None for p in per_seed):
        return None
    total: dict[str, int] = {}
    for actions in per_seed:
        for cause, n in (actions or {}).items():
            total[cause] = total.get(cause, 0) + int(n)
    return total


def slo_actions(actions: Mapping[str, int] | None) -> int | None:
    """The SLO-caused guard actions of a by-cause map (``SLO_CAUSES``)."""
    return None if actions is None else sum(int(actions.get(cause, 0)) for cause in SLO_CAUSES)


def goal_met(
    speedup_median: float | None, slo_caused: int | None, attainment_alone: float | None, attainment: float | None
) -> bool:
    """Issue 41's goal: >= 1.3x time to target, SLO-caused guard actions > 0, and serving attainment during
    training within 0.5 points of serving alone. A missing figure fails it."""
    if speedup_median is None or slo_caused is None or attainment_alone is None or attainment is None:
        return False
    return (
        speedup_median >= GOAL_SPEEDUP
        and slo_caused > 0
        and attainment >= attainment_alone - GOAL_ATTAINMENT_DROP - 1e-12
    )
