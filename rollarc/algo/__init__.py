"""Pure policy-gradient functions: advantages, log-probs, clipped losses, off-policy corrections.

No Ray, no I/O, no module state: tensors in, tensors out. ``policy_loss`` is the trainer's entry point.

The names below are imported on first use (:mod:`rollarc.lazy_exports`): the config layer imports
:mod:`.config` alone, and must not load torch for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollarc.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports on first use
    from rollarc.algo.advantages import (
        broadcast_to_tokens as broadcast_to_tokens,
    )
    from rollarc.algo.advantages import (
        dr_grpo_advantages as dr_grpo_advantages,
    )
    from rollarc.algo.advantages import (
        group_advantages as group_advantages,
    )
    from rollarc.algo.advantages import (
        grpo_advantages as grpo_advantages,
    )
    from rollarc.algo.advantages import (
        rloo_advantages as rloo_advantages,
    )
    from rollarc.algo.config import LossConfig as LossConfig
    from rollarc.algo.logprobs import entropy_from_logits as entropy_from_logits
    from rollarc.algo.logprobs import token_logprobs as token_logprobs
    from rollarc.algo.losses import entropy_bonus as entropy_bonus
    from rollarc.algo.losses import kl_k3 as kl_k3
    from rollarc.algo.losses import ppo_clip_loss as ppo_clip_loss
    from rollarc.algo.masking import aggregate as aggregate
    from rollarc.algo.masking import masked_mean as masked_mean
    from rollarc.algo.minibatch_loss import policy_loss as policy_loss
    from rollarc.algo.off_policy import (
        correction_terms as correction_terms,
    )
    from rollarc.algo.off_policy import (
        decoupled_weights as decoupled_weights,
    )
    from rollarc.algo.off_policy import (
        needs_proximal_logprobs as needs_proximal_logprobs,
    )
    from rollarc.algo.off_policy import (
        off_policy_stats as off_policy_stats,
    )
    from rollarc.algo.off_policy import (
        tis_weights as tis_weights,
    )

_WHERE = {
    "LossConfig": "config",
    "aggregate": "masking",
    "broadcast_to_tokens": "advantages",
    "correction_terms": "off_policy",
    "decoupled_weights": "off_policy",
    "dr_grpo_advantages": "advantages",
    "entropy_bonus": "losses",
    "entropy_from_logits": "logprobs",
    "group_advantages": "advantages",
    "grpo_advantages": "advantages",
    "kl_k3": "losses",
    "masked_mean": "masking",
    "needs_proximal_logprobs": "off_policy",
    "off_policy_stats": "off_policy",
    "policy_loss": "minibatch_loss",
    "ppo_clip_loss": "losses",
    "rloo_advantages": "advantages",
    "tis_weights": "off_policy",
    "token_logprobs": "logprobs",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports(__name__, _WHERE, globals())
