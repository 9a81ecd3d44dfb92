"""How much longer serving's step runs right after a rollout step than the latency model predicts.

On a shared core a rollout step leaves the caches (and the allocator, and the branch predictors) to rollout's
model, so the serving step after it can run longer than the same step after a serving step; the latency model,
fitted over both kinds, predicts their mix. The guard budgets that next serving step, so it scales its
prediction by this ratio: measured over predicted time of the serving steps that followed a rollout step,
weighted with exponential forgetting (so it follows the machine), never below 1 (a step that ran faster than
predicted gives the guard no reason to admit more), and capped (one stall must not shut rollout out for long).

Pure: the caller times its own steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AftermathRatio:
    decay: float = 0.9  # weight of the past per new observation: serving steps after rollout are few, so forget fast
    min_samples: int = 4  # below this, the factor is 1 (no evidence yet)
    cap: float = 3.0
    measured_s: float = 0.0  # forgetting sums of the serving steps after a rollout step
    predicted_s: float = 0.0
    samples: int = 0

    def observe(self, measured_s: float, predicted_s: float) -> None:
        """One serving step that ran right after a rollout step: its time and the model's prediction for it."""
        self.measured_s = self.decay * self.measured_s + measured_s
        self.predicted_s = self.decay * self.predicted_s + predicted_s
        self.samples += 1

    @property
    def factor(self) -> float:
        """What the guard multiplies its predicted serving step by: in [1, cap]."""
        if self.samples < self.min_samples or self.predicted_s <= 0.0:
            return 1.0
        return min(self.cap, max(1.0, self.measured_s / self.predicted_s))
