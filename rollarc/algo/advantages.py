"""Group-relative advantages: each rollout's reward compared with the other rollouts of its group.

Rewards come shaped ``[num_groups, group_size]``: one row per task seed, one column per rollout of it
(a GRPO group). Three estimators:

- ``grpo``: ``(r_i - mean(r)) / (std(r) + eps)``.
- ``dr_grpo``: ``r_i - mean(r)`` (Dr. GRPO: dividing by the std over-weights groups whose rewards
  barely differ, e.g. 1 success in 16; this estimator does not).
- ``rloo``: ``r_i - mean_{j != i} r_j`` (leave-one-out baseline: the baseline does not depend on the
  rollout it judges, so the estimator is unbiased). It equals ``G/(G-1) * (r_i - mean(r))``.

**Which std.** ``std="sample"`` (the default) divides the squared deviations by ``G - 1`` (Bessel's
correction). That is what ``torch.std`` does by default and what verl, TRL and OpenRLHF use, so the
same rewards give the same advantages as in those frameworks. ``std="population"`` divides by ``G``,
which makes the advantages of a group exact z-scores (population std 1); for ``G = 2`` it gives
``±1`` where the sample std gives ``±0.707``. Both give the same direction; they differ by the
constant factor ``sqrt((G-1)/G)`` for a fixed group size, i.e. an effective learning-rate change.

**Zero-variance groups** (every rollout got the same reward) carry no learning signal: their
advantages are exactly 0, never NaN and never a rounding residue divided by ``eps``.

**A group of one** (a configured ``group_size`` is at least 2, but a group can shrink when rollouts
fail) has nothing to be compared with: its advantage is 0 under every estimator (``rloo``'s
leave-one-out baseline would be an empty mean).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rollarc.algo.kinds import ADVANTAGE_KINDS, STD_KINDS, AdvantageKind, StdKind


def grpo_advantages(rewards: Tensor, eps: float = 1e-6, std: StdKind = "sample") -> Tensor:
    """``(r - mean) / (std + eps)`` within each group (row); see the module docstring for ``std``."""
    if std not in STD_KINDS:
        raise ValueError(f"unknown std kind {std!r}; allowed: {', '.join(STD_KINDS)}")
    rewards = _checked(rewards)
    correction = 1 if std == "sample" and rewards.shape[1] > 1 else 0  # a sample std of one value is undefined
    spread = rewards.std(dim=1, keepdim=True, correction=correction)
    return _zero_constant_groups(rewards, _centred(rewards) / (spread + eps))


def dr_grpo_advantages(rewards: Tensor) -> Tensor:
    """``r - mean`` within each group: GRPO without the std normalisation."""
    rewards = _checked(rewards)
    return _zero_constant_groups(rewards, _centred(rewards))


def rloo_advantages(rewards: Tensor) -> Tensor:
    """``r_i - mean_{j != i} r_j`` within each group (leave-one-out baseline)."""
    rewards = _checked(rewards)
    group_size = rewards.shape[1]
    baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / max(group_size - 1, 1)
    return _zero_constant_groups(rewards, rewards - baseline)


def group_advantages(
    rewards: Tensor, kind: AdvantageKind = "grpo", eps: float = 1e-6, std: StdKind = "sample"
) -> Tensor:
    """Advantages ``[num_groups, group_size]`` of the estimator named ``kind``.

    ``eps`` and ``std`` only affect ``grpo``; the other estimators do not divide by a spread.
    """
    if kind == "grpo":
        return grpo_advantages(rewards, eps=eps, std=std)
    if kind == "dr_grpo":
        return dr_grpo_advantages(rewards)
    if kind == "rloo":
        return rloo_advantages(rewards)
    raise ValueError(f"unknown advantage kind {kind!r}; allowed: {', '.join(ADVANTAGE_KINDS)}")


def broadcast_to_tokens(adv_per_seq: Tensor, mask: Tensor) -> Tensor:
    """Spread one advantage per sequence ``[batch]`` over its tokens ``[batch, tokens]``.

    Every token where ``mask`` is set gets its sequence's advantage; every other token gets 0.
    """
    if adv_per_seq.ndim != 1 or mask.ndim != 2 or mask.shape[0] != adv_per_seq.shape[0]:
        raise ValueError(
            f"need advantages [batch] and mask [batch, tokens]; got {tuple(adv_per_seq.shape)} and {tuple(mask.shape)}"
        )
    selected = mask if mask.dtype == torch.bool else mask != 0
    return torch.where(selected, adv_per_seq[:, None], 0.0)


def _checked(rewards: Tensor) -> Tensor:
    if rewards.ndim != 2 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must be shaped [num_groups, group_size], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if not torch.isfinite(rewards).all():
        bad = (~torch.isfinite(rewards)).nonzero()[0].tolist()
        raise ValueError(f"rewards must be finite; rewards[{bad[0]}, {bad[1]}] = {rewards[bad[0], bad[1]].item()}")
    return rewards


def _centred(rewards: Tensor) -> Tensor:
    return rewards - rewards.mean(dim=1, keepdim=True)


def _zero_constant_groups(rewards: Tensor, advantages: Tensor) -> Tensor:
    constant = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    return torch.where(constant, 0.0, advantages)
