"""Kendall's τ-b between two rankings of the same seeds (stale vs fresh per-seed rewards).

τ-b counts concordant minus discordant pairs, normalised with the ties of each side, so a list of
binary rewards (many ties) still gives a value in [−1, 1]. ``O(n²)``: n is a few dozen seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """τ-b of ``a`` against ``b``; ``None`` when either side is constant (τ is undefined)."""
    if len(a) != len(b):
        raise ValueError(f"lengths differ: {len(a)} and {len(b)}")
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b))
    if denom == 0:
        return None
    return (concordant - discordant) / denom
