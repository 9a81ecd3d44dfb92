"""One benchmark figure over several seeds: the per-seed values, their median and their spread.

Training benchmarks run several seeds and publish the median with the range, never one seed's value
alone. A seed whose figure is missing (a failed run, a target never reached) is kept as ``None`` in
``per_seed`` and left out of the median and the range; ``complete`` says whether any was missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any


def seed_stats(values: Sequence[float | None]) -> dict[str, Any]:
    """``{"per_seed", "median", "min", "max", "complete"}`` of one figure over seeds."""
    known = [float(v) for v in values if v is not None]
    return {
        "per_seed": list(values),
        "median": median(known) if known else None,
        "min": min(known) if known else None,
        "max": max(known) if known else None,
        "complete": len(known) == len(values) and bool(values),
    }
