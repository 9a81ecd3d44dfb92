"""Ulysses sequence parallelism for the PixArt DiT forward pass, over ``torch.distributed`` (gloo or NCCL).

Each of ``P`` ranks holds ``N / P`` of the ``N`` image tokens. Everything in a PixArt block but
self-attention acts on one token at a time (adaLN, the feed-forward, cross-attention to the replicated
prompt), so it runs on the local shard unchanged. Self-attention needs every token: an all-to-all turns
``[B, N/P, H, D]`` (a sequence shard, all heads) into ``[B, N, H/P, D]`` (every token, a head shard),
each rank attends over the full sequence for its heads, and a second all-to-all turns the result back.
The output tokens are all-gathered at the end to unpatchify.

With ``staged`` (members sharing one GPU on gloo, which exchanges only CPU tensors in these collectives:
:func:`~rollarc.diffusion.t2i_device.sp_transport`) each exchange copies its tensors through the CPU.

So ``P`` must divide the heads and the tokens: :func:`largest_degree` is the SP degree a group regroups
to after a loss. The attention runs as a diffusers attention processor (``set_attn_processor``, the
library's own extension point) on each block's ``attn1``; :func:`sp_forward` follows
``PixArtTransformer2DModel.forward`` with the shard in place of the full sequence.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor


def largest_degree(members: int, heads: int, tokens: int) -> int:
    """The largest SP degree ``<= members`` that divides both the heads and the tokens (at least 1)."""
    if members < 1:
        raise ValueError(f"an SP group needs at least one member, got {members}")
    return max(d for d in range(1, members + 1) if heads % d == 0 and tokens % d == 0)


def all_to_all(send: Tensor, group: Any, staged: bool = False) -> Tensor:
    """``all_to_all_single`` of ``send`` (split on its first dimension); ``staged``: through CPU copies."""
    if not staged:
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        return recv
    return all_to_all(send.cpu(), group).to(send.device)


def all_gather(part: Tensor, size: int, group: Any, staged: bool = False) -> list[Tensor]:
    """Every rank's ``part`` in rank order; ``staged``: through CPU copies."""
    if staged:
        return [p.to(part.device) for p in all_gather(part.cpu(), size, group)]
    parts = [torch.empty_like(part) for _ in range(size)]
    dist.all_gather(parts, part.contiguous(), group=group)
    return parts


def seq_to_heads(x: Tensor, size: int, group: Any, staged: bool = False) -> Tensor:
    """``[B, n, H, D]`` (this rank's tokens, every head) → ``[B, n·size, H/size, D]`` (every token, its heads)."""
    if size == 1:
        return x
    b, n, h, d = x.shape
    send = x.reshape(b, n, size, h // size, d).permute(2, 1, 0, 3, 4).contiguous()
    recv = all_to_all(send, group, staged)
    return recv.permute(2, 0, 1, 3, 4).reshape(b, size * n, h // size, d)


def heads_to_seq(x: Tensor, size: int, group: Any, staged: bool = False) -> Tensor:
    """The inverse of :func:`seq_to_heads`: ``[B, N, H/size, D]`` → ``[B, N/size, H, D]``."""
    if size == 1:
        return x
    b, total, hp, d = x.shape
    n = total // size
    send = x.reshape(b, size, n, hp, d).permute(1, 2, 0, 3, 4).contiguous()
    recv = all_to_all(send, group, staged)
    return recv.permute(2, 1, 0, 3, 4).reshape(b, n, size * hp, d)


class UlyssesSelfAttention:
    """A diffusers attention processor: self-attention of a sequence shard via two all-to-alls."""

    def __init__(self, size: int, group: Any, staged: bool = False):
        self.size, self.group, self.staged = size, group, staged

    def __call__(
        self,
        attn: Any,
        hidden_states: Tensor,
        encoder_hidden_states: Tensor | None = None,
        attention_mask: Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Tensor:
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("Ulysses self-attention takes neither a context nor a mask (PixArt's attn1 has none)")
        b, n, _ = hidden_states.shape
        heads = attn.heads
        q, k, v = (proj(hidden_states).view(b, n, heads, -1) for proj in (attn.to_q, attn.to_k, attn.to_v))
        q, k, v = (seq_to_heads(t, self.size, self.group, self.staged).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)  # [B, H/P, N, D]
        out = heads_to_seq(out.transpose(1, 2), self.size, self.group, self.staged).reshape(b, n, -1)
        out = attn.to_out[1](attn.to_out[0](out))
        return out / attn.rescale_output_factor


def use_ulysses(transformer: Any, size: int, group: Any, staged: bool = False) -> None:
    """Install the SP processor on every block's self-attention (cross-attention keeps its own)."""
    for block in transformer.transformer_blocks:
        block.attn1.set_processor(UlyssesSelfAttention(size, group, staged))


@torch.no_grad()
def sp_forward(
    transformer: Any,
    x: Tensor,
    t: Tensor,
    hidden: Tensor,
    mask: Tensor,
    rank: int,
    size: int,
    group: Any,
    staged: bool = False,
) -> Tensor:
    """The DiT's velocity for ``x`` with this rank's token shard; every rank returns the full output.

    ``use_ulysses(transformer, size, group, staged)`` must have been called for this group.
    """
    cfg = transformer.config
    p = cfg.patch_size
    batch, height, width = x.shape[0], x.shape[-2] // p, x.shape[-1] // p
    tokens = height * width
    if tokens % size:
        raise ValueError(f"{tokens} image tokens do not split over an SP group of {size}")
    n = tokens // size
    bias = ((1 - mask.to(x.dtype)) * -10000.0).unsqueeze(1)
    h = transformer.pos_embed(x)[:, rank * n : (rank + 1) * n]
    timestep, embedded = transformer.adaln_single(
        t * 1000.0, {"resolution": None, "aspect_ratio": None}, batch_size=batch, hidden_dtype=h.dtype
    )
    context = transformer.caption_projection(hidden).view(batch, -1, h.shape[-1])
    for block in transformer.transformer_blocks:
        h = block(h, encoder_hidden_states=context, encoder_attention_mask=bias, timestep=timestep)
    shift, scale = (transformer.scale_shift_table[None] + embedded[:, None]).chunk(2, dim=1)
    h = transformer.proj_out(transformer.norm_out(h) * (1 + scale) + shift)
    if size > 1:
        h = torch.cat(all_gather(h, size, group, staged), dim=1)
    h = h.reshape(batch, height, width, p, p, transformer.out_channels)
    return torch.einsum("nhwpqc->nchpwq", h).reshape(batch, transformer.out_channels, height * p, width * p)
