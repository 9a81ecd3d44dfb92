"""Where a training step's proximal log-probs (``pi_prox``, the weights the step starts from) come from.

``tis`` and ``decoupled_ppo`` need ``logp_prox`` for every token (``rollarc/algo/off_policy.py``). A step that
makes several optimiser steps (``train.minibatches`` or ``train.epochs`` above 1) must compute them with a no-grad
forward before the first one, since later minibatches run on weights that have already moved. A step that makes
*one* optimiser step runs its loss forward on exactly the step's starting weights, so that forward's log-probs,
detached, are ``logp_prox``: the extra forward (a fifth of the trainer's work with a KL reference) computes the
same numbers again. verl's actor anchors its on-policy steps (one minibatch, one epoch) the same way.

That holds only if a training-mode forward is deterministic: dropout would make the two forwards differ, so a
model with any dropout keeps the separate forward (``algo.proximal: auto``); ``recompute`` always keeps it.
"""

from __future__ import annotations

from typing import Any

import torch

from rollarc.algo.config import LossConfig
from rollarc.algo.off_policy import needs_proximal_logprobs


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a training-mode forward of ``model`` is random: a dropout module, or a config dropout, above 0.

    Hugging Face attention applies its ``attention_dropout`` functionally, with no module to find, so the
    config's ``*dropout*``/``*pdrop*`` numbers are read too (``classifier_dropout: null`` and the like count as 0).
    """
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return True
    config: Any = getattr(model, "config", None)
    settings = config.to_dict() if config is not None and hasattr(config, "to_dict") else {}
    return any(
        ("dropout" in key or "pdrop" in key)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and value > 0
        for key, value in settings.items()
    )


def prox_from_loss_forward(model: torch.nn.Module, loss_cfg: LossConfig, minibatches: int, epochs: int) -> bool:
    """Whether each step takes ``logp_prox`` from its loss forward (detached) instead of a separate forward."""
    return (
        needs_proximal_logprobs(loss_cfg.correction)
        and loss_cfg.proximal == "auto"
        and minibatches == 1
        and epochs == 1
        and not has_dropout(model)
    )
