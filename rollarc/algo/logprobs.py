"""Per-token log-probs and entropies of a causal LM, for the tokens it actually predicted.

**Shift convention.** A causal LM's ``logits[:, t]`` is the distribution of the *next* token,
``ids[:, t+1]``. The caller aligns them by dropping the last logit and the first id; these functions
then work position by position, with no shift of their own:

    logits = model(input_ids=ids).logits[:, :-1]        # [batch, T-1, vocab]
    logp = token_logprobs(logits, ids[:, 1:])           # [batch, T-1]
    logp[:, t] == log p(ids[:, t+1] | ids[:, :t+1])

Every per-token tensor of the loss (assistant mask, behaviour log-probs, versions, advantages) is
indexed the same way: index ``t`` is the token ``ids[:, t+1]``. Passing the unshifted ``ids`` with
unsliced logits is an off-by-one these functions cannot detect (the shapes agree); slice as above.

**Temperature.** Behaviour log-probs are those of the distribution the engine sampled from, i.e. of
``logits / temperature``. Recompute with the same temperature or every ratio is off by construction.

**Memory.** The log-prob of the chosen token is ``logit[id] - logsumexp(logits)``: a gather plus a
reduction. ``log_softmax(...).gather(...)`` gives the same number but keeps a whole new normalised
``[batch, tokens, vocab]`` tensor alive for the backward pass; ``logsumexp`` saves only its input
(the logits, alive anyway) and a ``[batch, tokens]`` result. Half-precision logits are upcast to
float32 first: a bf16 log-softmax over a large vocabulary loses the small differences PPO ratios need.
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(logits: Tensor, target_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """``log softmax(logits / temperature)[target_ids]`` at every position.

    ``logits`` ``[..., vocab]`` and ``target_ids`` ``[...]`` are already aligned: ``target_ids[..., t]`` is
    the token that ``logits[..., t, :]`` predicted (see the module docstring for the slicing).
    """
    _check(logits, temperature)
    if target_ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"target_ids has shape {tuple(target_ids.shape)} but logits are {tuple(logits.shape)}; "
            "need target_ids [..., tokens] for logits [..., tokens, vocab] "
            "(logits[:, :-1] with ids[:, 1:])"
        )
    if target_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"target_ids must be an integer tensor, got {target_ids.dtype}")
    vocab = logits.shape[-1]
    if target_ids.numel() and (target_ids.min() < 0 or target_ids.max() >= vocab):
        raise ValueError(
            f"target_ids must lie in [0, {vocab}) (the vocabulary of the logits); "
            f"got min {target_ids.min().item()} and max {target_ids.max().item()}"
        )
    scores = _scaled(logits, temperature)
    picked = scores.gather(-1, target_ids.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scores, dim=-1)


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy ``[...]`` of ``softmax(logits / temperature)`` at every position of ``logits [..., vocab]``.

    ``H = logsumexp(z) - sum softmax(z) * z`` with ``z = logits / temperature``. This equals
    ``torch.distributions.Categorical(logits=z).entropy()`` but does not materialise the normalised
    logits next to the probabilities (one ``[batch, tokens, vocab]`` tensor fewer).
    """
    _check(logits, temperature)
    scores = _scaled(logits, temperature)
    probs = torch.softmax(scores, dim=-1)
    return torch.logsumexp(scores, dim=-1) - (probs * scores).sum(dim=-1)


def _check(logits: Tensor, temperature: float) -> None:
    if logits.ndim < 2:
        raise ValueError(f"logits must be [..., tokens, vocab], got shape {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _scaled(logits: Tensor, temperature: float) -> Tensor:
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return logits if temperature == 1.0 else logits / temperature
