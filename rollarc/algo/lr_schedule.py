"""The RL learning-rate schedule: a linear warmup, then a constant, linear or cosine decay to a floor.

Why decay: late in a run most groups are all-success (advantage 0), so the few groups left with signal carry
the whole batch gradient, while Adam normalises every update to about ``lr`` in size. A constant ``lr`` then
takes full-size steps on the noisiest batches of the run, which is where the quickstart's late collapses came
from (docs/algorithms.md, "Learning-rate schedule"). Decaying to a floor keeps the late steps small.
"""

from __future__ import annotations

import math
from typing import Literal

LrDecay = Literal["constant", "linear", "cosine"]


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, decay: LrDecay, min_ratio: float) -> float:
    """The factor on the peak ``lr`` for 0-based training step ``step``.

    Warmup: ``(step + 1) / warmup_steps`` over the first ``warmup_steps`` steps (the last warmup step runs
    at the peak). Then, with progress ``p = (step + 1 − warmup_steps) / (total_steps − warmup_steps)``, so
    that the last step (``step = total_steps − 1``) runs exactly at the floor:
    ``linear``: ``min_ratio + (1 − min_ratio)·(1 − p)``; ``cosine``: ``min_ratio + (1 − min_ratio)·(1 + cos πp)/2``;
    ``constant``: 1. Steps past ``total_steps`` (a resumed run that asks for more) stay at the floor.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio must be in [0, 1], got {min_ratio}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if decay == "constant" or total_steps <= warmup_steps:
        return 1.0
    p = min(1.0, (step + 1 - warmup_steps) / (total_steps - warmup_steps))
    if decay == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - p)
    if decay == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"decay={decay!r}: allowed are 'constant', 'linear', 'cosine'")
