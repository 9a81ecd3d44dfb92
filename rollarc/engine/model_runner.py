"""Executes prefill and batched decode of a Llama-family HF model over the slot KV cache.

The runner calls the HF model's own submodules (embedding, q/k/v/o projections, q/k norms, MLP,
norms, ``lm_head``, and ``rotary_emb`` for cos/sin, so RoPE scaling variants are transformers' own),
so it shares the weights of the HF model object: a weight update is a ``copy_`` into that model.
Only attention is rollarc's: ``scaled_dot_product_attention`` over the slot cache.

- Decode: one query token per running request, slots ``0..B-1``. Grouped-query attention without
  repeating K/V: the query heads of one KV head are laid out as that head's query "sequence"
  (``[B, kv_heads, heads_per_kv, head_dim]``), so one SDPA call with a ``[B, 1, 1, Lmax]`` length mask
  covers the batch.
- Prefill: the new tokens of several requests are packed into one ``[T, hidden]`` batch for every
  matmul; attention runs per request (causal, offset by the request's reused prefix).

Supported: ``model_type`` in :data:`SUPPORTED_MODEL_TYPES` (Llama, Qwen2 with attention bias, Qwen3
with q/k norm, Mistral and Qwen2/3 sliding-window layers). Anything else raises
:class:`UnsupportedModelError` naming the ``model_type``; there is no slow fallback, because a second
execution path would need its own KV bookkeeping and would silently change throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rollarc.engine.kv_cache import SlotKVCache

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
_PLAIN_RMSNORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"}


class UnsupportedModelError(ValueError):
    """The model's architecture is not one the runner executes."""


@dataclass(frozen=True)
class ModelGeometry:
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int


@dataclass(frozen=True)
class PrefillSeq:
    """The part of one request to prefill: ``token_ids`` go to positions ``start .. start+len-1`` of ``slot``."""

    slot: int
    start: int
    token_ids: Sequence[int]


def model_geometry(model: Any) -> ModelGeometry:  # an HF model: submodules are reached by name
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"rollarc's engine does not support model_type {model_type!r}; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    attn = model.model.layers[0].self_attn
    return ModelGeometry(
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        head_dim=attn.head_dim,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_position_embeddings,
    )


def _norm_fn(module: Any) -> Callable[[torch.Tensor], torch.Tensor]:  # an HF norm module
    """The norm as one fused op when it is the plain RMSNorm of the supported families, else the module.

    ``F.rms_norm`` computes ``x · rsqrt(mean(x²) + eps) · weight`` like those modules in one op instead
    of six; it reads the module's own ``weight``, so updates are seen.
    """
    if type(module).__name__ in _PLAIN_RMSNORMS:
        weight, eps = module.weight, module.variance_epsilon
        shape = (weight.shape[0],)
        return lambda x: F.rms_norm(x, shape, weight, eps)
    return module


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """``x·cos + rotate_half(x)·sin``; ``rotate_half`` is a roll by half with the sign folded into ``sin_signed``."""
    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, dims=-1), sin_signed)


class _Layer:
    """Handles on one decoder layer's submodules (no copies of weights)."""

    def __init__(self, layer: Any, config: object) -> None:  # an HF decoder layer
        attn = layer.self_attn
        self.input_norm = _norm_fn(layer.input_layernorm)
        self.post_norm = _norm_fn(layer.post_attention_layernorm)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.q_norm = _norm_fn(attn.q_norm) if getattr(attn, "q_norm", None) is not None else None
        self.k_norm = _norm_fn(attn.k_norm) if getattr(attn, "k_norm", None) is not None else None
        self.mlp = layer.mlp
        self.scaling = float(attn.scaling)
        # Qwen2/Qwen3 set it per layer (None on full-attention layers); Mistral only in the config.
        window = attn.sliding_window if hasattr(attn, "sliding_window") else getattr(config, "sliding_window", None)
        self.sliding_window: int | None = int(window) if window else None


class ModelRunner:
    def __init__(self, model: Any, kv: SlotKVCache) -> None:  # an HF causal LM
        self.geometry = model_geometry(model)
        self.model = model
        self.kv = kv
        self.embed = model.model.embed_tokens
        self.rotary_emb = model.model.rotary_emb
        self.final_norm = _norm_fn(model.model.norm)
        self.lm_head = model.lm_head
        self.layers = [_Layer(layer, model.config) for layer in model.model.layers]
        g = self.geometry
        self.heads_per_kv = g.num_heads // g.num_kv_heads
        self.device = kv.data.device
        half = g.head_dim // 2
        self._rope_sign = torch.cat([-torch.ones(half), torch.ones(g.head_dim - half)]).to(self.device, kv.data.dtype)
        self._positions = torch.arange(kv.max_model_len, device=self.device)
        self._rows = torch.arange(kv.max_num_seqs, device=self.device)
        # Windows that actually bite at this max_model_len; the others are plain causal attention.
        self.windows = sorted(
            {w for w in (layer.sliding_window for layer in self.layers) if w is not None and w < kv.max_model_len}
        )

    def _cos_sin(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin for ``positions [N]``, shaped ``[N, 1, head_dim]`` to broadcast over heads."""
        cos, sin = self.rotary_emb(x, positions[None])
        return cos[0, :, None, :], (sin[0] * self._rope_sign)[:, None, :]

    def _q(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Projected, normed and rotated queries ``[N, H, D]``."""
        q = layer.q_proj(h).view(h.shape[0], self.geometry.num_heads, self.geometry.head_dim)
        if layer.q_norm is not None:
            q = layer.q_norm(q)
        return _rope(q, cos, sin)

    def _kv(
        self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected, normed and rotated keys and values, ``[N, KV, D]`` each."""
        g = self.geometry
        k = layer.k_proj(h).view(h.shape[0], g.num_kv_heads, g.head_dim)
        v = layer.v_proj(h).view(h.shape[0], g.num_kv_heads, g.head_dim)
        if layer.k_norm is not None:
            k = layer.k_norm(k)
        return _rope(k, cos, sin), v

    def decode(self, token_ids: torch.Tensor, positions: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """One token for each running request (slots ``0..B-1``): ``token_ids [B]`` at ``positions [B]``.

        Writes their K/V at ``positions`` and returns next-token logits ``[B, vocab]``. ``length`` is
        ``max(positions) + 1``; a caller that knows it passes it, which saves a device-to-host sync.
        """
        g = self.geometry
        batch = token_ids.shape[0]
        length = int(positions.max()) + 1 if length is None else length
        rows = self._rows[:batch]
        key_pos = self._positions[:length][None, :]
        masks: dict[int | None, torch.Tensor] = {None: (key_pos <= positions[:, None])[:, None, None, :]}
        for window in self.windows:
            masks[window] = masks[None] & (key_pos > positions[:, None] - window)[:, None, None, :]
        x = self.embed(token_ids)
        cos, sin = self._cos_sin(x, positions)
        for index, layer in enumerate(self.layers):
            h = layer.input_norm(x)
            q = self._q(layer, h, cos, sin)
            k, v = self._kv(layer, h, cos, sin)
            keys, values = self.kv.keys(index), self.kv.values(index)
            keys[rows, :, positions] = k
            values[rows, :, positions] = v
            out = F.scaled_dot_product_attention(
                q.view(batch, g.num_kv_heads, self.heads_per_kv, g.head_dim),
                keys[:batch, :, :length],
                values[:batch, :, :length],
                attn_mask=masks[layer.sliding_window if layer.sliding_window in masks else None],
                scale=layer.scaling,
            )
            x = x + layer.o_proj(out.reshape(batch, g.num_heads * g.head_dim))
            x = x + layer.mlp(layer.post_norm(x))
        return self.lm_head(self.final_norm(x))

    def prefill(self, seqs: Sequence[PrefillSeq]) -> torch.Tensor:
        """Run the new tokens of ``seqs`` (packed) and fill their KV; returns last-token logits ``[R, vocab]``.

        Every layer computes K/V for all tokens, but the last layer needs its attention, ``o_proj`` and
        MLP only at each sequence's last token (the only one whose logits are used), so it computes
        just those rows: exact, and about ``1 / num_layers`` less prefill work.
        """
        g = self.geometry
        lengths = [len(s.token_ids) for s in seqs]
        token_ids = torch.tensor([t for s in seqs for t in s.token_ids], dtype=torch.long, device=self.device)
        positions = torch.cat([self._positions[s.start : s.start + n] for s, n in zip(seqs, lengths, strict=True)])
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        last = torch.tensor([a + n - 1 for a, n in zip(offsets, lengths, strict=False)], device=self.device)
        masks = [self._prefill_masks(s.start, n) for s, n in zip(seqs, lengths, strict=True)]
        x = self.embed(token_ids)
        cos, sin = self._cos_sin(x, positions)
        final = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            h = layer.input_norm(x)
            k, v = self._kv(layer, h, cos, sin)
            keys, values = self.kv.keys(index), self.kv.values(index)
            for seq, n, a in zip(seqs, lengths, offsets, strict=False):
                keys[seq.slot, :, seq.start : seq.start + n] = k[a : a + n].transpose(0, 1)
                values[seq.slot, :, seq.start : seq.start + n] = v[a : a + n].transpose(0, 1)
            if index < final:
                q = self._q(layer, h, cos, sin)
                outs = []
                for seq, n, a, mask in zip(seqs, lengths, offsets, masks, strict=False):
                    end = seq.start + n
                    window_mask = mask.get(layer.sliding_window, mask[None])
                    out = F.scaled_dot_product_attention(
                        q[a : a + n].transpose(0, 1)[None],
                        keys[seq.slot : seq.slot + 1, :, :end],
                        values[seq.slot : seq.slot + 1, :, :end],
                        attn_mask=window_mask,
                        is_causal=window_mask is None,
                        scale=layer.scaling,
                        enable_gqa=True,
                    )
                    outs.append(out[0].transpose(0, 1).reshape(n, g.num_heads * g.head_dim))
            else:
                x, q = x[last], self._q(layer, h[last], cos[last], sin[last])
                outs = []
                for row, (seq, n) in enumerate(zip(seqs, lengths, strict=True)):
                    end = seq.start + n
                    begin = max(0, end - layer.sliding_window) if layer.sliding_window else 0
                    out = F.scaled_dot_product_attention(
                        q[row].view(1, g.num_kv_heads, self.heads_per_kv, g.head_dim),
                        keys[seq.slot : seq.slot + 1, :, begin:end],
                        values[seq.slot : seq.slot + 1, :, begin:end],
                        scale=layer.scaling,
                    )
                    outs.append(out.reshape(1, g.num_heads * g.head_dim))
            x = x + layer.o_proj(torch.cat(outs) if len(outs) > 1 else outs[0])
            x = x + layer.mlp(layer.post_norm(x))
        return self.lm_head(self.final_norm(x))

    def _prefill_masks(self, start: int, n: int) -> dict[int | None, torch.Tensor | None]:
        """Attention masks ``[n, start+n]`` (True = attend) per sliding window; None = plain causal from 0."""
        masks: dict[int | None, torch.Tensor | None] = {}
        if start == 0:
            masks[None] = None
        query_pos = self._positions[start : start + n][:, None]
        key_pos = self._positions[: start + n][None, :]
        causal = key_pos <= query_pos
        if start > 0:
            masks[None] = causal
        for window in self.windows:
            masks[window] = causal & (key_pos > query_pos - window)
        return masks
