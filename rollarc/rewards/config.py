"""The ``reward:`` section of the training config."""

from __future__ import annotations

from typing import Literal

from rollarc.configio import FrozenModel


class RewardConfig(FrozenModel):
    """Where the trajectory reward comes from. ``rule``: the environment's own reward, in-process."""

    kind: Literal["rule"] = "rule"
