"""The bandit planner: which prompts get exploration budget, and how much (UCB1 over arms that recur).

An arm is a key that recurs across steps: a prompt's *template* (its task's structure with the free
attributes blanked, e.g. ``two * squares left and one * plus right``), or the prompt itself. With
135 train prompts and a few prompts per step, a prompt is rarely seen twice in a run, so per-prompt
arms never leave their exploration phase; a template recurs every few steps.

Exploring a prompt pays off when it raises the trained group's reward variance, so an arm's reward is
the observed *gain*: the variance of the group trained on (fresh rewards of the chosen seeds) minus the
variance of the explored candidates (what a random group would have had). An arm's score is UCB1::

    score = mean_gain + c · sqrt(ln n_total / n_arm)

An arm never pulled takes the best score among this step's pulled arms (optimism, without letting a
single unseen template take the whole budget); when none is pulled, all prompts count alike. The
step's budget is then split by :func:`rollarc.spotlight.budget.plan_candidates`: the best-scoring
prompts are explored with more candidates, the worst not at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollarc.spotlight.budget import plan_candidates
from rollarc.spotlight.selection import population_variance


def contrast_gain(stale_candidates: Sequence[float], fresh_group: Sequence[float]) -> float:
    """An explored prompt's gain: the trained group's (fresh) reward variance minus that of its candidates
    (stale), i.e. of what a random group would have had."""
    return population_variance(list(fresh_group)) - population_variance(list(stale_candidates))


@dataclass
class Arm:
    pulls: int = 0
    total_gain: float = 0.0

    @property
    def mean_gain(self) -> float:
        return self.total_gain / self.pulls if self.pulls else 0.0


@dataclass
class UcbPlanner:
    """UCB1 over arm keys; ``observe`` after each step, ``allocate`` before the next."""

    exploration: float = 0.01
    arms: dict[str, Arm] = field(default_factory=dict)

    def score(self, key: str) -> float:
        arm = self.arms.get(key)
        if arm is None or arm.pulls == 0:
            return math.inf
        total = sum(a.pulls for a in self.arms.values())
        return arm.mean_gain + self.exploration * math.sqrt(math.log(max(total, 1)) / arm.pulls)

    def observe(self, key: str, gain: float) -> None:
        arm = self.arms.setdefault(key, Arm())
        arm.pulls += 1
        arm.total_gain += gain

    def observe_step(
        self, keys: Sequence[str], stale: Sequence[Sequence[float]], fresh: Sequence[Sequence[float]], group: int
    ) -> None:
        """A finished step's prompts: each explored beyond ``group`` candidates observes its :func:`contrast_gain`
        (one explored with only ``group`` trained on a random group; one not explored gained nothing to learn from)."""
        for key, cands, f in zip(keys, stale, fresh, strict=True):
            if len(cands) > group:
                self.observe(key, contrast_gain(cands, f))

    def step_scores(self, keys: Sequence[str]) -> list[float]:
        """Scores of this step's arms, an unseen arm taking the best seen score (1.0 when none is seen)."""
        raw = [self.score(k) for k in keys]
        seen = [s for s in raw if not math.isinf(s)]
        best = max(seen) if seen else 1.0
        return [best if math.isinf(s) else s for s in raw]

    def allocate(self, keys: Sequence[str], budget: int, group: int, chunk: int) -> list[int]:
        """Candidates per prompt (same order as ``keys``, the prompts' arms): 0 or ``group + chunk · n``."""
        return plan_candidates(self.step_scores(keys), budget, group, chunk)

    def state(self) -> dict[str, list[float]]:
        return {k: [a.pulls, a.total_gain] for k, a in self.arms.items()}

    def load(self, state: dict[str, list[float]]) -> None:
        self.arms = {k: Arm(int(v[0]), float(v[1])) for k, v in state.items()}
