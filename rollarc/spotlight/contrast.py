"""The contrast planner: spend exploration where a prompt's seeds disagree, not where they all score alike.

GRPO learns from a group only through its reward spread: a group whose rewards are equal has zero
advantages and carries no gradient, and exploring more seeds of a prompt whose every seed scores the
same (solved, or hopeless under the current weights) cannot find a spread that is not there. So an
arm's score is the prompt's observed **contrast**, the population reward std over its seeds:

- a prompt explored this step gives the std of its explored candidates (stale rewards, the widest
  sample of its seeds); a prompt not explored gives the std of its trained group (fresh rewards of
  ``G`` random seeds), so every prompt is observed every step it is drawn and none starves;
- an arm's score is an exponential moving average of its observations (``decay``: the weight kept by
  the older ones; contrast moves as the policy learns);
- an arm never observed takes the best score among the step's observed arms (optimism); with none
  observed every prompt counts alike.

The step's budget is split by :func:`rollarc.spotlight.budget.plan_candidates`.

A UCB1 bandit over the observed variance gain was tried beside it and removed: measured over 3 seeds it was
level with uniform exploration (docs/diffusion.md#stale-weight-seed-exploration-and-its-planner-rollarcspotlight).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollarc.spotlight.budget import plan_candidates
from rollarc.spotlight.selection import population_variance


def observed_contrast(stale_candidates: Sequence[float], fresh_group: Sequence[float]) -> float:
    """A prompt's contrast this step: the std of its explored candidates, or of its trained group if unexplored."""
    values = stale_candidates if len(stale_candidates) else fresh_group
    return math.sqrt(population_variance(list(values)))


@dataclass
class ContrastArm:
    observations: int = 0
    score: float = 0.0


@dataclass
class ContrastPlanner:
    """Moving-average contrast per arm key; ``observe`` after each step, ``allocate`` before the next."""

    decay: float = 0.5
    arms: dict[str, ContrastArm] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {self.decay}")

    def observe(self, key: str, contrast: float) -> None:
        arm = self.arms.setdefault(key, ContrastArm())
        arm.score = contrast if arm.observations == 0 else self.decay * arm.score + (1 - self.decay) * contrast
        arm.observations += 1

    def observe_step(
        self, keys: Sequence[str], stale: Sequence[Sequence[float]], fresh: Sequence[Sequence[float]]
    ) -> None:
        """Every prompt of a finished step: its arm observes :func:`observed_contrast`."""
        for key, cands, f in zip(keys, stale, fresh, strict=True):
            self.observe(key, observed_contrast(cands, f))

    def step_scores(self, keys: Sequence[str]) -> list[float]:
        """Scores of this step's arms, an unseen arm taking the best seen score (1.0 when none is seen)."""
        seen = [self.arms[k].score for k in keys if k in self.arms]
        best = max(seen) if seen else 1.0
        return [self.arms[k].score if k in self.arms else best for k in keys]

    def allocate(self, keys: Sequence[str], budget: int, group: int, chunk: int) -> list[int]:
        """Candidates per prompt (same order as ``keys``): 0 or ``group + chunk · n``."""
        return plan_candidates(self.step_scores(keys), budget, group, chunk)

    def state(self) -> dict[str, list[float]]:
        return {k: [a.observations, a.score] for k, a in self.arms.items()}

    def load(self, state: dict[str, list[float]]) -> None:
        self.arms = {k: ContrastArm(int(v[0]), float(v[1])) for k, v in state.items()}
