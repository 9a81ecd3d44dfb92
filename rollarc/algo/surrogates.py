"""The policy-gradient surrogates other than PPO's token clip: GSPO's sequence ratio and CISPO's clipped weight.

Both take the same per-token inputs as :func:`rollarc.algo.losses.ppo_clip_loss` (``[batch, tokens]``, the
anchor ``logp_old`` without gradient, ``mask`` on the policy's own tokens, detached ``token_weights`` from the
off-policy correction) and return ``(loss, stats)`` with the same statistic names, so the trainer and its
metrics do not care which surrogate ran. Written here because neither TRL's nor verl's implementation is a
library function that takes rollarc's tensors (each is fused into its trainer); the formulas are the papers'.

**GSPO** (Zheng et al., 2025, "Group Sequence Policy Optimization"): one importance ratio per sequence, the
length-normalised likelihood ratio ``s_i = exp(mean_t(logp - logp_old))`` over its masked tokens, clipped as PPO
clips a token's, times the sequence's advantage::

    loss = - mean_i  w_i * min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i)

over the sequences with at least one masked token; ``A_i`` is the sequence's (masked mean) advantage and
``w_i`` the masked mean of its token weights (1 without an off-policy correction). The paper's clip ranges are
far narrower than PPO's (3e-4 / 4e-4), because ``s_i`` is a geometric mean over the sequence.

**CISPO** (MiniMax-M1, 2025): REINFORCE on every token, weighted by its importance ratio clipped and detached,
so no token's gradient is ever dropped (PPO's clip zeroes the gradient of tokens outside the range)::

    loss = - agg_t  w_t * sg(clip(rho_t, 1 - clip_low, 1 + clip_high)) * A_t * logp_t

With ``rho = 1`` (on-policy) its gradient equals PPO's: ``-A * grad(logp)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rollarc.algo.kinds import Aggregation
from rollarc.algo.losses import kl_k3, token_clip_stats
from rollarc.algo.masking import aggregate, as_bool_mask, masked_mean, zero_outside


def _checked(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor, token_weights: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The inputs with masked-out entries zeroed (before any ``exp``: ``0 * inf`` is NaN) and weights filled."""
    mask = as_bool_mask(mask, logp)
    for name, other in (("logp_old", logp_old), ("advantages", advantages), ("token_weights", token_weights)):
        if other is not None and other.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(other.shape)} but logp has {tuple(logp.shape)}")
    weights = torch.ones_like(logp) if token_weights is None else token_weights.detach()
    logp, logp_old, advantages, weights = (
        zero_outside(t, mask) for t in (logp, logp_old.detach(), advantages.detach(), weights)
    )
    return logp, logp_old, advantages, weights, mask


def gspo_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO's sequence-level clipped surrogate (module docstring); ``clip_frac`` is a share of sequences."""
    logp, logp_old, advantages, weights, mask = _checked(logp, logp_old, advantages, mask, token_weights)
    tokens = mask.sum(dim=-1)
    present = tokens > 0
    per_seq_count = tokens.clamp(min=1)
    seq_log_ratio = (logp - logp_old).sum(dim=-1) / per_seq_count
    seq_ratio = torch.exp(seq_log_ratio)
    seq_adv = advantages.sum(dim=-1) / per_seq_count
    seq_weight = weights.sum(dim=-1) / per_seq_count
    unclipped = seq_ratio * seq_adv
    clipped = torch.clamp(seq_ratio, 1 - clip_low, 1 + clip_high) * seq_adv
    per_seq = -torch.minimum(unclipped, clipped) * seq_weight
    sequences = present.sum().clamp(min=1)
    loss = torch.where(present, per_seq, 0.0).sum() / sequences
    clipped_high = present & (seq_adv > 0) & (seq_ratio > 1 + clip_high)
    clipped_low = present & (seq_adv < 0) & (seq_ratio < 1 - clip_low)
    with torch.no_grad():
        ratio_mean = torch.where(present, seq_ratio, 0.0).sum() / sequences
        stats = {
            "pg_loss": loss.detach(),
            "clip_frac": (clipped_high | clipped_low).sum() / sequences,
            "clip_frac_high": clipped_high.sum() / sequences,
            "clip_frac_low": clipped_low.sum() / sequences,
            "ratio_mean": ratio_mean,
            "approx_kl": masked_mean(kl_k3(logp_old, logp), mask),
        }
    return loss, stats


def cispo_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    agg: Aggregation = "token_mean",
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO's clipped-weight REINFORCE (module docstring); ``clip_frac`` is the share of tokens whose weight the
    clip changed (their gradient still flows, scaled)."""
    logp, logp_old, advantages, weights, mask = _checked(logp, logp_old, advantages, mask, token_weights)
    ratio = torch.exp(logp.detach() - logp_old)
    is_weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -(weights * is_weight * advantages) * logp
    loss = aggregate(per_token, mask, agg)
    clipped_high = ratio > 1 + clip_high
    clipped_low = ratio < 1 - clip_low
    return loss, token_clip_stats(loss, ratio, clipped_high, clipped_low, mask, logp_old, logp)
