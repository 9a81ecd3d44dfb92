"""The bandit planner: which prompts get exploration budget, and how much (UCB1 over prompts).

Each prompt is an arm. Exploring a prompt's seeds pays off when it raises the group's reward variance,
so an arm's reward is the observed *gain*: the variance of the group trained on (fresh rewards of the
chosen seeds) minus the variance of the explored candidates (what a random group would have had). The
planner scores each prompt of the next step by UCB1::

    score = mean_gain + c · sqrt(ln(n_total) / n_arm)        (an arm never pulled scores +inf)

and splits the step's extra candidates (beyond the ``G`` every group needs) over the prompts in
proportion to their score, by largest remainder, in whole chunks. Unseen prompts come first; a prompt
whose exploration never helped (gain ≤ 0) still keeps the exploration bonus, so it is retried now and then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Arm:
    pulls: int = 0
    total_gain: float = 0.0

    @property
    def mean_gain(self) -> float:
        return self.total_gain / self.pulls if self.pulls else 0.0


@dataclass
class UcbPlanner:
    """UCB1 over prompts; ``observe`` after each step, ``allocate`` before the next."""

    exploration: float = 0.05
    arms: dict[str, Arm] = field(default_factory=dict)

    def score(self, prompt: str) -> float:
        arm = self.arms.get(prompt)
        if arm is None or arm.pulls == 0:
            return math.inf
        total = sum(a.pulls for a in self.arms.values())
        return arm.mean_gain + self.exploration * math.sqrt(math.log(max(total, 1)) / arm.pulls)

    def observe(self, prompt: str, gain: float) -> None:
        arm = self.arms.setdefault(prompt, Arm())
        arm.pulls += 1
        arm.total_gain += gain

    def allocate(self, prompts: Sequence[str], budget_chunks: int) -> list[int]:
        """Chunks of extra candidates per prompt (same order), summing to ``budget_chunks``."""
        return split_by_score([self.score(p) for p in prompts], budget_chunks)


def split_by_score(scores: Sequence[float], chunks: int) -> list[int]:
    """Largest-remainder split of ``chunks`` in proportion to ``scores`` (clipped at 0).

    Infinite scores (unseen arms) share the budget among themselves first; all-zero scores split evenly.
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
