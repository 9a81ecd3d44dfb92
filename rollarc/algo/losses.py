"""The clipped PPO surrogate, the k3 KL estimator and the entropy bonus, per token.

All inputs are per-token tensors ``[batch, tokens]`` aligned as in :mod:`rollarc.algo.logprobs`;
``mask`` marks the policy's own tokens. Every statistic is a detached 0-d tensor (no device sync
here; call ``.item()`` when logging).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rollarc.algo.kinds import Aggregation
from rollarc.algo.masking import aggregate, as_bool_mask, masked_mean, zero_outside


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimate ``exp(ref - logp) - (ref - logp) - 1`` (always >= 0).

    With tokens sampled from the policy of ``logp`` its mean estimates ``KL(pi || pi_ref)`` without
    bias and with lower variance than ``logp - ref``. Written as ``expm1(d) - d``, exact near d = 0.
    """
    diff = ref_logp - logp
    return torch.expm1(diff) - diff


def ppo_clip_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: Aggregation = "token_mean",
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped policy-gradient loss ``-min(rho*A, clip(rho, 1-clip_low, 1+clip_high)*A)`` aggregated by ``agg``.

    ``rho = exp(logp - logp_old)``; ``logp_old`` is the clip anchor and gets no gradient.
    ``token_weights`` (detached) multiply each token's loss: this is how off-policy corrections
    enter (see :mod:`rollarc.algo.off_policy`). Masked-out tokens contribute nothing, whatever
    their values (even inf or NaN).

    Stats (masked token means): ``pg_loss``; ``clip_frac`` = share of tokens whose gradient the clip
    removed, split into ``clip_frac_high`` (A > 0 and rho > 1+clip_high) and ``clip_frac_low``
    (A < 0 and rho < 1-clip_low); ``ratio_mean``; ``approx_kl`` = k3 estimate of KL(pi_old || pi).
    """
    mask = as_bool_mask(mask, logp)
    for name, other in (("logp_old", logp_old), ("advantages", advantages), ("token_weights", token_weights)):
        if other is not None and other.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(other.shape)} but logp has {tuple(logp.shape)}")
    if not (0 < clip_low < 1 and clip_high > 0):
        raise ValueError(f"need 0 < clip_low < 1 and clip_high > 0, got clip_low={clip_low}, clip_high={clip_high}")
    # Zero masked-out entries before exp(): exp(inf) there would make the backward pass 0 * inf = NaN.
    logp, logp_old, advantages = (zero_outside(t, mask) for t in (logp, logp_old.detach(), advantages.detach()))
    log_ratio = logp - logp_old
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    if token_weights is not None:
        per_token = per_token * zero_outside(token_weights.detach(), mask)
    loss = aggregate(per_token, mask, agg)

    clipped_high = (advantages > 0) & (ratio > 1 + clip_high)
    clipped_low = (advantages < 0) & (ratio < 1 - clip_low)
    return loss, token_clip_stats(loss, ratio, clipped_high, clipped_low, mask, logp_old, logp)


def token_clip_stats(
    loss: Tensor, ratio: Tensor, clipped_high: Tensor, clipped_low: Tensor, mask: Tensor, logp_old: Tensor, logp: Tensor
) -> dict[str, Tensor]:
    """The per-token surrogates' statistics (masked token means, detached): ``pg_loss``, the clipped shares,
    ``ratio_mean`` and ``approx_kl`` (k3 estimate of KL(pi_old || pi))."""
    with torch.no_grad():
        return {
            "pg_loss": loss.detach(),
            "clip_frac": masked_mean((clipped_high | clipped_low).float(), mask),
            "clip_frac_high": masked_mean(clipped_high.float(), mask),
            "clip_frac_low": masked_mean(clipped_low.float(), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "approx_kl": masked_mean(kl_k3(logp_old, logp.detach()), mask),
        }


def entropy_bonus(entropy: Tensor, mask: Tensor, coef: float, agg: Aggregation = "token_mean") -> Tensor:
    """The loss term ``-coef * aggregate(entropy)``: adding it rewards a policy that keeps exploring."""
    return -coef * aggregate(entropy, as_bool_mask(mask, entropy), agg)
