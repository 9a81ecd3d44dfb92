"""Choose a GRPO group from explored seeds: the ``G`` seeds whose (stale) rewards differ the most.

The subset of size ``G`` with the largest variance is always some ``j`` highest rewards plus the
``G − j`` lowest (moving any chosen value towards the middle cannot raise the spread), so the search is
over ``j = 0..G`` only, ``O(N log N)``. Ties keep the earlier seed, so the choice is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence


def population_variance(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("variance of an empty list")
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def max_contrast_subset(rewards: Sequence[float], size: int) -> list[int]:
    """Indices (ascending) of the ``size`` rewards with the largest population variance."""
    if not 1 <= size <= len(rewards):
        raise ValueError(f"size must be in 1..{len(rewards)}, got {size}")
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))  # highest first, stable
    best: list[int] = []
    best_var = -1.0
    for top in range(size + 1):
        chosen = order[:top] + order[len(order) - (size - top) :] if size - top else order[:top]
        var = population_variance([rewards[i] for i in chosen])
        if var > best_var + 1e-12:
            best, best_var = chosen, var
    return sorted(best)
