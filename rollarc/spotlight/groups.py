"""Per-step group choice from explored seeds, and the exploration metrics the controller logs (pure).

A prompt the planner did not explore (no candidates scored) trains on its fallback seeds, the first
``G`` of its candidate list, exactly as in the baseline; its stale rewards are unknown (``None``), and
it is left out of every contrast and τ metric, which describe explored prompts only.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rollarc.spotlight.kendall import kendall_tau
from rollarc.spotlight.selection import max_contrast_subset, population_variance


def choose_groups(
    candidates: Sequence[Sequence[int]],
    stale: Sequence[Sequence[float]],
    fallback: Sequence[Sequence[int]],
    size: int,
) -> tuple[list[list[int]], list[list[float] | None]]:
    """Per prompt: the ``size`` most contrastive explored seeds and their stale rewards, or the fallback."""
    seeds: list[list[int]] = []
    chosen_stale: list[list[float] | None] = []
    for cand, rewards, back in zip(candidates, stale, fallback, strict=True):
        if len(rewards) != len(cand):
            raise ValueError(f"{len(rewards)} stale rewards for {len(cand)} candidate seeds")
        if not rewards:
            seeds.append(list(back[:size]))
            chosen_stale.append(None)
            continue
        pick = max_contrast_subset(rewards, size)
        seeds.append([cand[i] for i in pick])
        chosen_stale.append([rewards[i] for i in pick])
    return seeds, chosen_stale


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def exploration_stats(
    stale: Sequence[Sequence[float]],
    chosen_stale: Sequence[Sequence[float] | None],
    fresh: Sequence[Sequence[float]],
    size: int,
) -> dict[str, Any]:
    """The step's exploration metrics (means over explored prompts; ``None`` when there is none).

    ``kendall_tau``: τ-b between the stale and fresh rewards of the chosen seeds; ``chosen_var_*``: the
    chosen groups' reward variance, stale and fresh; ``random_var_stale``: that of the first ``size``
    candidates (a random group); ``explored_fraction`` and ``candidates_min``/``_max``/``_std``: how the
    budget was spread over the step's prompts (a uniform split has std 0 and fraction 1).
    """
    explored = [i for i, c in enumerate(chosen_stale) if c is not None]
    taus = [kendall_tau(chosen_stale[i] or [], list(fresh[i])) for i in explored]
    counts = [float(len(s)) for s in stale]
    return {
        "kendall_tau": _mean([t for t in taus if t is not None]),
        "chosen_var_stale": _mean([population_variance(chosen_stale[i] or []) for i in explored]),
        "chosen_var_fresh": _mean([population_variance(list(fresh[i])) for i in explored]),
        "random_var_stale": _mean([population_variance(list(stale[i][:size])) for i in explored]),
        "explored_fraction": len(explored) / len(stale) if stale else 0.0,
        "candidates_min": min(counts, default=0.0),
        "candidates_max": max(counts, default=0.0),
        "candidates_std": statistics.pstdev(counts) if counts else 0.0,
    }
