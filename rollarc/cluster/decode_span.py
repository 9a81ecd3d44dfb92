"""Time of many decode iterations of a fixed batch, and its inverse, in closed form.

While no sequence joins or leaves, an engine's batch is fixed but every iteration adds one token of
KV per sequence, so the per-iteration time grows linearly with the iteration index ``x``:

    tau(x) = max(floor, base + slope · x) + overhead

(``floor`` is the compute-bound time, ``base + slope·x`` the bandwidth-bound one). The simulator
advances an engine from one event to the next in one step, so it needs the time of ``n`` iterations
and the iterations done in ``dt``. Both are integrals of ``tau`` treated as continuous in ``x`` (a
fluid approximation: the error is under one iteration per event), solved exactly here rather than
by stepping token by token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IterationCost:
    floor: float
    base: float
    slope: float
    overhead: float = 0.0

    def step(self, x: float = 0.0) -> float:
        """tau(x): the time of the iteration at index ``x``."""
        return max(self.floor, self.base + self.slope * x) + self.overhead


def _kink(cost: IterationCost) -> float:
    """Iteration index where the bandwidth term overtakes the floor (0 if it already has)."""
    if cost.base >= cost.floor:
        return 0.0
    if cost.slope <= 0.0:
        return math.inf
    return (cost.floor - cost.base) / cost.slope


def span_time(cost: IterationCost, n: float) -> float:
    """Time of ``n`` iterations starting at index 0."""
    if n <= 0.0:
        return 0.0
    kink = _kink(cost)
    flat = min(n, kink)
    time = flat * (cost.floor + cost.overhead)
    rest = n - flat
    if rest > 0.0:
        start = cost.base + cost.slope * flat
        time += rest * (start + cost.overhead) + cost.slope * rest * rest / 2.0
    return time


def iterations_in(cost: IterationCost, dt: float) -> float:
    """Iterations completed in ``dt`` seconds starting at index 0 (inverse of :func:`span_time`)."""
    if dt <= 0.0:
        return 0.0
    if cost.step(0.0) <= 0.0 and cost.slope <= 0.0:
        raise ValueError(f"decode iteration time is not positive: {cost}")
    kink = _kink(cost)
    flat_rate = cost.floor + cost.overhead
    if kink > 0.0:
        flat_time = kink * flat_rate if kink != math.inf else math.inf
        if dt <= flat_time:
            return dt / flat_rate
        dt -= flat_time
        start = flat_rate
    else:
        kink = 0.0
        start = cost.base + cost.overhead
    if cost.slope <= 0.0:
        return kink + dt / start
    # Solve start·y + slope·y²/2 = dt for y >= 0 in the form that does not cancel.
    return kink + 2.0 * dt / (start + math.sqrt(start * start + 2.0 * cost.slope * dt))
