"""Time to target for ``rollarc bench async``: the target fixed before the runs, each seed's crossing of it, the
strongest synchronous baseline, and every mode's speed-up against it with the grid's bounds
(:mod:`rollarc.bench.time_to_target` holds the arithmetic).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollarc.bench.async_modes import SYNC_MODES
from rollarc.bench.time_to_target import Crossing, Ratio, crossing, grid_error, ratio_with_bounds, spread, strongest

# A ratio's grid bounds are about E x (1/n_base + 1/n_other) wide, relative, for an evaluation every E steps and
# crossings after n steps; on longtail.yaml the modes crossed after 60-90 steps (2026-12-03), so E = 2 keeps the
# width near 6 % (E = 3 near 9 %, too close to the limit for a mode that crosses sooner). An evaluation
# (200 episodes, about 20 s there) is outside RL wall time in every mode.
DEFAULT_EVAL_EVERY = 2
GRID_ERROR_LIMIT = 0.10  # the grid may not move a reported ratio by more than this (issue 40)


def time_to_target(runs: dict[str, list[dict[str, Any]]], target: float | None, source: str) -> dict[str, Any]:
    """The time-to-target keys of the JSON line, from every seed's run of every seeded mode (each with its
    ``curve`` and the ``steps`` of its points) and a target (``None``: no target, every time is ``null``)."""
    crossings: dict[str, list[Crossing | None]] = {
        label: [None if target is None else crossing(r["curve"], target) for r in seeds]
        for label, seeds in runs.items()
    }
    sync_modes = [label for label in runs if label in SYNC_MODES]
    baseline = strongest({label: crossings[label] for label in sync_modes})
    ratios = {
        s: {label: ratio_with_bounds(crossings[s], c) for label, c in crossings.items() if label != s}
        for s in sync_modes
    }
    times = {label: [None if c is None else c.t for c in cs] for label, cs in crossings.items()}
    out: dict[str, Any] = {
        "target": target,
        "target_source": source,
        "time_to_target_s": times,
        # the crossing lies between these two evaluations' times: [last below the target, first at or above]
        "time_to_target_bounds_s": {
            label: [None if c is None else [c.lo, c.hi] for c in cs] for label, cs in crossings.items()
        },
        # the step of the first evaluation at or above the target
        "steps_to_target": {
            label: [None if c is None else r["steps"][c.index] for c, r in zip(cs, runs[label], strict=True)]
            for label, cs in crossings.items()
        },
        "time_to_target_spread_s": {label: spread(t) for label, t in times.items()},
        "sync_modes": sync_modes,
        "baseline_mode": baseline,
        "baseline_speedups": {s: {label: _value(r) for label, r in row.items()} for s, row in ratios.items()},
        "baseline_speedup_bounds": {s: {label: _bounds(r) for label, r in row.items()} for s, row in ratios.items()},
    }
    against = ratios.get(baseline, {}) if baseline is not None else {}
    for k in (1, 2):
        out[f"speedup_to_target_k{k}"] = _value(against.get(f"async_k{k}"))
        out[f"speedup_to_target_k{k}_bounds"] = _bounds(against.get(f"async_k{k}"))
    out["speedup_to_target"] = {label: _value(r) for label, r in against.items()}  # every mode's, against the baseline
    reported = [r for row in ratios.values() for r in row.values() if r is not None]
    error = grid_error(reported)
    unbounded = any(r.hi is None for r in reported)
    out["grid_error"] = error
    out["grid_error_limit"] = GRID_ERROR_LIMIT
    out["grid_error_over_limit"] = unbounded or (error is not None and error > GRID_ERROR_LIMIT)
    return out


def _value(ratio: Ratio | None) -> float | None:
    return None if ratio is None else ratio.value


def _bounds(ratio: Ratio | None) -> list[float | None] | None:
    return None if ratio is None else [ratio.lo, ratio.hi]


def fixed_target(target: float | None, target_from: str | None) -> tuple[float | None, str]:
    """The target fixed before the runs and where it came from; ``(None, "")`` when none was given."""
    if target is not None:
        return target, "--target, fixed before the runs"
    if target_from is None:
        return None, ""
    data = json.loads(Path(target_from).read_text())
    value = data.get("target", data.get("target_success"))
    if not isinstance(value, int | float):
        raise ValueError(f"--target-from {target_from}: no numeric 'target' or 'target_success' in it")
    commit = f" at commit {data['commit']}" if data.get("commit") else ""
    return float(value), f"the target of {target_from} (the run{commit}), fixed before these runs"
