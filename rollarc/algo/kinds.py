"""The names the loss configuration chooses among, as literal types: no torch.

Apart from the modules that implement them so that :mod:`rollarc.algo.config`, which the whole config layer
imports, does not import torch (:mod:`rollarc.lazy_exports` says why that matters).
"""

from __future__ import annotations

from typing import Literal, get_args

AdvantageKind = Literal["grpo", "dr_grpo", "rloo"]
ADVANTAGE_KINDS: tuple[str, ...] = get_args(AdvantageKind)
StdKind = Literal["sample", "population"]
STD_KINDS: tuple[str, ...] = get_args(StdKind)
Aggregation = Literal["token_mean", "seq_mean"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
Correction = Literal["none", "tis", "decoupled_ppo"]
CORRECTIONS: tuple[str, ...] = get_args(Correction)
