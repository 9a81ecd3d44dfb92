"""Off-policy corrections: which log-prob PPO clips against, and how much each token weighs.

Three policies meet in one training step of asynchronous RL:

- ``pi_behav``: the weights that *generated* a token (log-probs recorded by the engine, with the
  policy version). Under staleness ``k`` it may be up to ``k`` optimiser steps old, and even at
  ``k = 0`` the engine's numerics differ slightly from the trainer's.
- ``pi_prox``: the weights this training step *starts* from. The trainer recomputes their log-probs
  (``logp_prox``) for the whole batch under ``torch.no_grad()`` **before the first minibatch's
  optimiser step**, and reuses them for every minibatch and epoch of the step.
- ``pi_theta``: the weights being optimised (``logp``, with gradient).

What each correction does per token (``A`` = advantage, ``clip`` = PPO clip, ``sg`` = no gradient):

==============  ==================  ==========================================  ==================
correction      ratio that is       token weight                                needs ``logp_prox``
                clipped
==============  ==================  ==========================================  ==================
none            pi_theta/pi_behav   1                                           no
tis             pi_theta/pi_prox    sg(min(pi_prox/pi_behav, tis_cap))          yes
decoupled_ppo   pi_theta/pi_prox    sg(pi_prox/pi_behav); with decoupled_cap    yes
                                    set, 0 where that ratio > decoupled_cap
==============  ==================  ==========================================  ==================

``tis`` and ``decoupled_ppo`` share the clip anchor and differ only in the weight. ``tis`` truncates
(a token far off-policy still counts, with weight ``tis_cap``: biased, bounded variance).
``decoupled_ppo`` keeps the exact importance ratio (unbiased, unbounded variance); its optional cap
drops the tokens beyond it instead, as AReaL's ``behav_imp_weight_cap`` does. A dropped token still
counts in the ``token_mean`` / ``seq_mean`` denominator, so dropping never inflates the others.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rollarc.algo.kinds import CORRECTIONS, Correction
from rollarc.algo.losses import kl_k3
from rollarc.algo.masking import masked_mean, zero_outside


def needs_proximal_logprobs(correction: Correction) -> bool:
    """Whether the trainer must recompute ``logp_prox`` before the first minibatch of a step."""
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown off-policy correction {correction!r}; allowed: {', '.join(CORRECTIONS)}")
    return correction != "none"


def tis_weights(logp_prox: Tensor, logp_behav: Tensor, cap: float) -> Tensor:
    """Truncated importance weights ``min(pi_prox/pi_behav, cap)``, detached."""
    ratio = torch.exp(logp_prox.detach() - logp_behav.detach())
    return torch.clamp(ratio, max=cap)


def decoupled_weights(logp_prox: Tensor, logp_behav: Tensor, cap: float | None = None) -> Tensor:
    """Importance weights ``pi_prox/pi_behav``, detached; with ``cap``, 0 where the weight exceeds it."""
    ratio = torch.exp(logp_prox.detach() - logp_behav.detach())
    return ratio if cap is None else torch.where(ratio <= cap, ratio, 0.0)


def correction_terms(
    correction: Correction,
    logp_behav: Tensor,
    logp_prox: Tensor | None,
    tis_cap: float = 2.0,
    decoupled_cap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The clip anchor (log-probs the PPO ratio is taken against) and the per-token weights (or None)."""
    if not needs_proximal_logprobs(correction):
        return logp_behav.detach(), None
    if logp_prox is None:
        raise ValueError(
            f"correction={correction!r} needs logp_prox: recompute the log-probs under the weights "
            "the training step starts from, before its first optimiser step"
        )
    if logp_prox.shape != logp_behav.shape:
        raise ValueError(f"logp_prox has shape {tuple(logp_prox.shape)} but logp_behav has {tuple(logp_behav.shape)}")
    if correction == "tis":
        return logp_prox.detach(), tis_weights(logp_prox, logp_behav, tis_cap)
    return logp_prox.detach(), decoupled_weights(logp_prox, logp_behav, decoupled_cap)


def off_policy_stats(
    logp_behav: Tensor, logp_prox: Tensor, mask: Tensor, weights: Tensor | None = None
) -> dict[str, Tensor]:
    """How far the batch is off-policy, over the masked tokens (detached 0-d tensors).

    ``behav_kl``: k3 estimate of KL(pi_behav || pi_prox). ``behav_ratio_mean`` / ``behav_ratio_max``:
    the raw ratio pi_prox/pi_behav. With ``weights``: ``is_weight_mean`` (the weights applied) and
    ``is_capped_frac`` (share of tokens whose weight the cap changed).
    """
    with torch.no_grad():
        logp_behav, logp_prox = zero_outside(logp_behav, mask), zero_outside(logp_prox, mask)
        ratio = torch.exp(logp_prox - logp_behav)
        stats = {
            "behav_kl": masked_mean(kl_k3(logp_behav, logp_prox), mask),
            "behav_ratio_mean": masked_mean(ratio, mask),
            "behav_ratio_max": zero_outside(ratio, mask).max() if ratio.numel() else ratio.new_zeros(()),
        }
        if weights is not None:
            stats["is_weight_mean"] = masked_mean(weights, mask)
            stats["is_capped_frac"] = masked_mean((weights != ratio).float(), mask)
    return stats
