"""``policy_loss``: the one entry point the trainer calls per minibatch.

It assembles the pieces: the off-policy correction picks the clip anchor and the token weights
(:mod:`rollarc.algo.off_policy`), the surrogate chosen by ``cfg.surrogate`` does the rest (PPO's token clip in
:mod:`rollarc.algo.losses`, GSPO and CISPO in :mod:`rollarc.algo.surrogates`), and the KL-to-reference and
entropy terms are added with their coefficients:

    loss = agg(w * surrogate) + kl_coef * agg(k3(logp, ref_logp)) - entropy_coef * agg(entropy)

The KL and entropy terms are regularisers evaluated on the sampled tokens; they are *not*
importance-weighted.
"""

from __future__ import annotations

from torch import Tensor

from rollarc.algo.config import LossConfig
from rollarc.algo.losses import entropy_bonus, kl_k3, ppo_clip_loss
from rollarc.algo.masking import aggregate, as_bool_mask, zero_outside
from rollarc.algo.off_policy import correction_terms, off_policy_stats
from rollarc.algo.surrogates import cispo_loss, gspo_loss


def policy_loss(
    logp: Tensor,
    logp_behav: Tensor,
    logp_prox: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Scalar loss to minimise and detached 0-d statistics.

    All tensors are per token, ``[batch, tokens]``, aligned as in :mod:`rollarc.algo.logprobs`:
    ``logp`` (current policy, with gradient), ``logp_behav`` (recorded at generation), ``logp_prox``
    (recomputed at the start of the training step; required by ``tis`` and ``decoupled_ppo``, used
    only for the off-policy statistics by ``none``), ``advantages`` (see ``broadcast_to_tokens``),
    ``mask`` (1 on the policy's own tokens). ``ref_logp`` is required when ``cfg.kl_coef > 0`` and
    ``entropy`` when ``cfg.entropy_coef > 0``; given with a zero coefficient they are only reported.
    """
    mask = as_bool_mask(mask, logp)
    optional = {"logp_prox": logp_prox, "ref_logp": ref_logp, "entropy": entropy}
    for name, value in {"logp_behav": logp_behav, "advantages": advantages, **optional}.items():
        if value is not None and value.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(value.shape)} but logp has {tuple(logp.shape)}")
    if cfg.kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef={cfg.kl_coef} needs ref_logp (log-probs of the reference model)")
    if cfg.entropy_coef > 0 and entropy is None:
        raise ValueError(f"entropy_coef={cfg.entropy_coef} needs the per-token entropy (entropy_from_logits)")

    logp_behav = zero_outside(logp_behav.detach(), mask)
    logp_prox = None if logp_prox is None else zero_outside(logp_prox.detach(), mask)
    anchor, weights = correction_terms(cfg.correction, logp_behav, logp_prox, cfg.tis_cap, cfg.decoupled_cap)
    if cfg.surrogate == "gspo":
        loss, stats = gspo_loss(logp, anchor, advantages, mask, cfg.clip_low, cfg.clip_high, token_weights=weights)
    elif cfg.surrogate == "cispo":
        loss, stats = cispo_loss(
            logp, anchor, advantages, mask, cfg.clip_low, cfg.clip_high, cfg.agg, token_weights=weights
        )
    else:
        loss, stats = ppo_clip_loss(
            logp, anchor, advantages, mask, cfg.clip_low, cfg.clip_high, cfg.agg, token_weights=weights
        )
    if logp_prox is not None:
        stats.update(off_policy_stats(logp_behav, logp_prox, mask, weights))
    if ref_logp is not None:
        kl = aggregate(kl_k3(zero_outside(logp, mask), zero_outside(ref_logp.detach(), mask)), mask, cfg.agg)
        stats["kl_ref"] = kl.detach()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    if entropy is not None:
        stats["entropy"] = aggregate(entropy.detach(), mask, cfg.agg)
        if cfg.entropy_coef > 0:
            loss = loss + entropy_bonus(entropy, mask, cfg.entropy_coef, cfg.agg)
    stats["loss"] = loss.detach()
    return loss, stats
