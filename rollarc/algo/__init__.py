"""Pure policy-gradient functions: advantages, log-probs, clipped losses, off-policy corrections.

No Ray, no I/O, no module state: tensors in, tensors out. ``policy_loss`` is the trainer's entry point.
"""

from rollarc.algo.advantages import (
    broadcast_to_tokens,
    dr_grpo_advantages,
    group_advantages,
    grpo_advantages,
    rloo_advantages,
)
from rollarc.algo.config import LossConfig
from rollarc.algo.logprobs import entropy_from_logits, token_logprobs
from rollarc.algo.losses import entropy_bonus, kl_k3, ppo_clip_loss
from rollarc.algo.masking import aggregate, masked_mean
from rollarc.algo.off_policy import (
    correction_terms,
    decoupled_weights,
    needs_proximal_logprobs,
    off_policy_stats,
    tis_weights,
)
from rollarc.algo.policy_loss import policy_loss

__all__ = [
    "LossConfig",
    "aggregate",
    "broadcast_to_tokens",
    "correction_terms",
    "decoupled_weights",
    "dr_grpo_advantages",
    "entropy_bonus",
    "entropy_from_logits",
    "group_advantages",
    "grpo_advantages",
    "kl_k3",
    "masked_mean",
    "needs_proximal_logprobs",
    "off_policy_stats",
    "policy_loss",
    "ppo_clip_loss",
    "rloo_advantages",
    "tis_weights",
    "token_logprobs",
]
