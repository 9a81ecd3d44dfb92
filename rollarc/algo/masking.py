"""Token masks and the masked reductions every per-token loss shares.

A mask marks the tokens the policy generated (assistant tokens). Prompt, environment and padding
tokens are 0 and must never contribute to a loss, a gradient or a statistic. Reductions select with
``torch.where`` instead of multiplying by the mask: ``0 * inf`` is NaN, so a ``-inf`` log-prob of a
padding token would otherwise poison the whole batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rollarc.algo.kinds import AGGREGATIONS, Aggregation


def as_bool_mask(mask: Tensor, like: Tensor, name: str = "mask") -> Tensor:
    """``mask`` as a bool tensor, after checking it has ``like``'s shape and holds only 0 and 1.

    A fractional mask (0.5) is rejected rather than rounded: it would silently mean something else.
    """
    if mask.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but the per-token values have {tuple(like.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1 (or be a bool tensor)")
    return mask != 0


def zero_outside(values: Tensor, mask: Tensor) -> Tensor:
    """``values`` where ``mask`` is true, exactly 0 elsewhere; no gradient flows to masked-out entries."""
    return torch.where(mask, values, 0.0)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the true entries of ``mask``; 0 (not NaN) when there are none."""
    count = mask.sum().clamp(min=1)
    return zero_outside(values, mask).sum() / count


def aggregate(values: Tensor, mask: Tensor, agg: Aggregation) -> Tensor:
    """Reduce per-token ``values`` of shape ``[batch, tokens]`` to a scalar.

    - ``token_mean``: every masked token of the batch weighs the same (long sequences weigh more).
    - ``seq_mean``: mean over sequences of each sequence's own masked-token mean (every sequence
      weighs the same). Sequences without a masked token are left out of the mean.

    Either way an all-masked-out batch gives 0, with a zero gradient.
    """
    if values.ndim != 2:
        raise ValueError(f"per-token values must be [batch, tokens], got shape {tuple(values.shape)}")
    if agg == "token_mean":
        return masked_mean(values, mask)
    if agg == "seq_mean":
        tokens_per_seq = mask.sum(dim=-1)
        per_seq = zero_outside(values, mask).sum(dim=-1) / tokens_per_seq.clamp(min=1)
        return per_seq.sum() / (tokens_per_seq > 0).sum().clamp(min=1)
    raise ValueError(f"unknown aggregation {agg!r}; allowed: {', '.join(AGGREGATIONS)}")
