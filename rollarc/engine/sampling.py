"""Pure sampling functions: greedy, temperature, top-k, top-p, with the log-prob of each chosen token.

Which log-prob is returned (what RL's behaviour policy is):

- ``temperature > 0``: the log-prob of the sampled token under the distribution it was actually drawn
  from: ``softmax(logits / T)`` restricted to the top-k / top-p set and renormalised over that set.
  With no top-k/top-p it is exactly ``log_softmax(logits / T)``.
- ``temperature == 0`` (greedy): the argmax token and its ``log_softmax(logits)`` (i.e. at T = 1), since
  the "sampled" distribution is a point mass whose log-prob (0) carries no information.

Top-k keeps the ``k`` most likely tokens; top-p then keeps the smallest most-likely-first set whose
mass reaches ``p`` (a token is kept when the mass before it is below ``p``), on the top-k
renormalised distribution, as vLLM does.

Sampling is by inverse CDF from one uniform number per row (over the tokens most likely first when top-k or
top-p filters, in vocabulary order otherwise: both draw each token with its probability), so the caller decides where randomness
comes from: a request with a seed draws its number from its own ``torch.Generator`` (see
:func:`draw_uniforms`) and its samples do not depend on the rest of the batch.

A row whose logits hold NaN or ±inf is reported in ``ok`` and never sampled from; the other rows
are unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class Sampled(NamedTuple):
    token_ids: torch.Tensor  # [B] int64
    logprobs: torch.Tensor  # [B] float32
    ok: torch.Tensor  # [B] bool: False where the row's logits were not finite


def draw_uniforms(generators: Sequence[torch.Generator | None], default: torch.Generator) -> torch.Tensor:
    """One U[0, 1) number per row: from the row's own generator if it has one, else from ``default``."""
    uniforms = torch.rand(len(generators), generator=default)
    for row, generator in enumerate(generators):
        if generator is not None:
            uniforms[row] = torch.rand((), generator=generator)
    return uniforms


def greedy(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax token of each row and its ``log_softmax(logits)``."""
    token_ids = logits.argmax(dim=-1)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, token_ids[:, None])[:, 0]
    return token_ids, logprobs


def filtered_sorted_logprobs(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of the tempered, top-k/top-p filtered, renormalised distribution, sorted most likely first.

    Returns ``(logprobs_sorted [B, V], order [B, V])``; filtered-out entries are ``-inf``.
    ``temperature`` must be > 0 on every row.
    """
    vocab = logits.shape[-1]
    sorted_logits, order = (logits / temperature[:, None]).sort(dim=-1, descending=True)
    keep = None
    if bool((top_k > 0).any()):
        k = torch.where(top_k > 0, top_k, vocab)
        keep = torch.arange(vocab, device=logits.device)[None, :] < k[:, None]
        sorted_logits = sorted_logits.masked_fill(~keep, float("-inf"))
    if bool((top_p < 1.0).any()):
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        keep_p = mass_before < top_p[:, None]
        keep_p[:, 0] = True
        sorted_logits = sorted_logits.masked_fill(~keep_p, float("-inf"))
    return torch.log_softmax(sorted_logits, dim=-1), order


def sample(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, uniforms: torch.Tensor
) -> Sampled:
    """Choose one token per row of ``logits [B, V]``; per-row parameters are ``[B]`` tensors.

    Rows with ``temperature == 0`` are greedy. See the module docstring for the log-probs returned.
    """
    logits = logits.float()
    ok = torch.isfinite(logits).all(dim=-1)
    if not bool(ok.all()):
        logits = torch.where(ok[:, None], logits, torch.zeros((), dtype=logits.dtype))
    is_greedy = temperature == 0
    if bool(is_greedy.all()):
        token_ids, logprobs = greedy(logits)
        return Sampled(token_ids, logprobs, ok)
    safe_temperature = torch.where(is_greedy, torch.ones_like(temperature), temperature)
    if bool((top_k > 0).any()) or bool((top_p < 1.0).any()):
        logprobs_ranked, order = filtered_sorted_logprobs(logits, safe_temperature, top_k, top_p)
    else:
        # No top-k/top-p on any row: nothing needs the tokens in probability order, so the sort (the largest
        # cost of a decode step's sampling on a small model) is skipped; the CDF runs in vocabulary order.
        logprobs_ranked, order = torch.log_softmax(logits / safe_temperature[:, None], dim=-1), None
    cdf = logprobs_ranked.exp().cumsum(dim=-1)
    # right=True picks the first index whose cdf exceeds u·total, which has non-zero probability.
    target = (uniforms.to(cdf.dtype) * cdf[:, -1])[:, None]
    rank = torch.searchsorted(cdf, target, right=True).clamp_(max=logits.shape[-1] - 1)
    token_ids = (order.gather(-1, rank) if order is not None else rank)[:, 0]
    logprobs = logprobs_ranked.gather(-1, rank)[:, 0]
    if bool(is_greedy.any()):
        greedy_ids, greedy_logprobs = greedy(logits)
        token_ids = torch.where(is_greedy, greedy_ids, token_ids)
        logprobs = torch.where(is_greedy, greedy_logprobs, logprobs)
    return Sampled(token_ids, logprobs, ok)
