"""The failed share of recently finished trajectories, behind ``async.max_failed_fraction``.

A sliding window over the outcomes of the last ``size`` finished training trajectories (finished well, kept
or dropped, or failed; cancelled redundant rollouts and evaluation episodes are not outcomes). The run stops once the window is full
and more than ``max_fraction`` of it failed: a window, not a running total, so a run that recovers is not
stopped by its past, and a full window, so the first few failures of a run do not stop it.
"""

from __future__ import annotations

from collections import deque


class FailureWindow:
    def __init__(self, size: int, max_fraction: float):
        if size < 1:
            raise ValueError(f"the failure window needs at least one trajectory, got {size}")
        self.max_fraction = max_fraction
        self._failed: deque[bool] = deque(maxlen=size)

    def add(self, ok: int, failed: int) -> None:
        """Record one group's finished trajectories: ``ok`` finished well, ``failed`` failed."""
        self._failed.extend([False] * ok + [True] * failed)

    @property
    def failed(self) -> int:
        return sum(self._failed)

    @property
    def size(self) -> int:
        return len(self._failed)

    def exceeded(self) -> bool:
        return len(self._failed) == self._failed.maxlen and self.failed > self.max_fraction * len(self._failed)
