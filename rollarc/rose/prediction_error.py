"""How far the guard's step predictions fall short, so that it budgets for its own error.

The SLO guard (``guard.py``) admits a rollout step when the predicted rollout and serving steps fit the SLO
minus a fixed margin. The latency model (``latency_model.py``) is a least-squares fit: it is right on
average and short about half the time, and on a busy machine its tail is long (a step that another process
delayed, or a shape whose features move together so that the fit puts their cost on the wrong one). At a
serving load where serving is seldom idle, every short prediction lands on a serving request: the heavier
window of docs/rose.md lost 1.4 points of attainment that way, with 25 rollout steps over 1.5x their
prediction and the guard acting almost never.

So each role's prediction is multiplied by a high quantile of its recent actual / predicted ratios: with
the 0.95 quantile, the guard budgets a step as long as 19 in 20 recent steps of that role turned out
relative to their predictions. The factor is never below 1 (a pessimistic model keeps its margin) and is 1
until ``min_samples`` ratios are known. Ratios are over a sliding window, so the factor follows the
machine. Pure: the caller times its steps and passes both numbers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class PredictionError:
    quantile: float = 0.95  # 0 disables: the factor stays 1
    window: int = 256  # ratios kept (the most recent steps)
    min_samples: int = 16
    _ratios: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile < 1.0:
            raise ValueError(f"quantile must be in [0, 1), got {self.quantile}")
        if self.window < 1 or self.min_samples < 1:
            raise ValueError(f"window and min_samples must be >= 1, got {self.window} and {self.min_samples}")
        self._ratios = deque(maxlen=self.window)

    def observe(self, predicted_s: float, actual_s: float) -> None:
        """One step: what the guard predicted and what it took (a step predicted to cost nothing is skipped)."""
        if predicted_s > 0.0 and actual_s >= 0.0 and math.isfinite(actual_s):
            self._ratios.append(actual_s / predicted_s)

    def factor(self) -> float:
        """The multiplier for the next prediction: the ``quantile`` of the recent ratios (nearest rank), >= 1."""
        if self.quantile == 0.0 or len(self._ratios) < self.min_samples:
            return 1.0
        ordered = sorted(self._ratios)
        rank = math.ceil(self.quantile * len(ordered)) - 1
        return max(1.0, ordered[max(0, rank)])
