"""Which task the next group samples: smooth weighted round-robin over the task weights.

Deterministic (same config, same sequence) and exact over any window: after ``n`` groups each task
has ``n * w / sum(w)`` groups, within one. Randomness would make the batch composition, and so the
synchronous-mode trajectories, depend on luck.
"""

from __future__ import annotations


class TaskMix:
    def __init__(self, weights: dict[str, float]):
        if not weights or any(w <= 0 for w in weights.values()):
            raise ValueError(f"task weights must be positive, got {weights}")
        self.weights = dict(weights)
        self.total = sum(weights.values())
        self.current = {name: 0.0 for name in weights}

    def next(self) -> str:
        for name, weight in self.weights.items():
            self.current[name] += weight
        chosen = max(self.current, key=lambda n: (self.current[n], -list(self.weights).index(n)))
        self.current[chosen] -= self.total
        return chosen

    def skip(self, count: int) -> None:
        """Advance past ``count`` choices (resuming a run)."""
        for _ in range(count):
            self.next()
