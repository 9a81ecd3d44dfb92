"""How a step's exploration budget (in explored images) is split over its prompts, given a score per prompt.

A prompt explored with only ``G`` candidates teaches nothing: all ``G`` are picked, which is a random
group, so those ``G`` images are wasted. Hence the split is all-or-more: a prompt is either not explored
(``0``: the trainer draws its first ``G`` candidate seeds, as the baseline does) or explored with
``G + chunk · n`` candidates, ``n ≥ 1``. The prompts with the best scores are explored, as many as the
budget can give at least ``G + chunk`` each in proportion to their scores; the extra chunks beyond
``G`` each are then split in proportion to the scores, by largest remainder. Images the chunking
cannot use are left unspent, so the total never exceeds the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def split_by_score(scores: Sequence[float], chunks: int) -> list[int]:
    """Largest-remainder split of ``chunks`` in proportion to ``scores`` (clipped at 0).

    Infinite scores share the budget among themselves first; all-zero scores split evenly.
    Ties in the remainder go to the earlier prompt.
    """
    if chunks < 0:
        raise ValueError(f"chunks must be >= 0, got {chunks}")
    if not scores:
        return []
    if any(math.isinf(s) for s in scores):
        weights = [1.0 if math.isinf(s) else 0.0 for s in scores]
    else:
        weights = [max(s, 0.0) for s in scores]
    if sum(weights) <= 0.0:
        weights = [1.0] * len(scores)
    total = sum(weights)
    exact = [chunks * w / total for w in weights]
    out = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(scores)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in by_remainder[: chunks - sum(out)]:
        out[i] += 1
    return out


def plan_candidates(scores: Sequence[float], budget: int, group: int, chunk: int) -> list[int]:
    """Candidates to explore per prompt (same order): ``0`` or ``group + chunk · n`` with ``n ≥ 1``.

    ``scores`` are finite; a prompt with a score ≤ 0 is explored only when no prompt scores above 0
    (then every prompt counts alike). The prompt with the lowest share is dropped until every kept
    prompt's proportional share of ``budget`` is at least ``group + chunk`` (ties drop the later prompt).
    """
    if group < 1 or chunk < 1 or budget < 0:
        raise ValueError(f"need group >= 1, chunk >= 1, budget >= 0 (got {group}, {chunk}, {budget})")
    if any(math.isinf(s) or math.isnan(s) for s in scores):
        raise ValueError(f"scores must be finite, got {list(scores)}")
    weights = [max(s, 0.0) for s in scores]
    if sum(weights) <= 0.0:
        weights = [1.0] * len(scores)
    active = [i for i, w in enumerate(weights) if w > 0.0]
    while active:
        total = sum(weights[i] for i in active)
        weakest = min(active, key=lambda i: (weights[i], -i))
        if budget * weights[weakest] / total >= group + chunk or len(active) == 1:
            break
        active.remove(weakest)
    out = [0] * len(scores)
    extra_chunks = (budget - group * len(active)) // chunk
    if not active or extra_chunks < len(active):
        return out  # the budget cannot explore even the best prompt usefully
    # every kept prompt gets one chunk first, the rest in proportion to the scores
    extra = split_by_score([weights[i] for i in active], extra_chunks - len(active))
    for i, n in zip(active, extra, strict=True):
        out[i] = group + chunk * (n + 1)
    return out
