"""Slot-based KV storage: one preallocated tensor, running requests compacted into slots ``0..B-1``.

Layout: ``[num_layers, 2 (K/V), max_num_seqs, num_kv_heads, max_model_len, head_dim]``. Because the
running requests always occupy the first ``B`` slots, a decode step attends over the plain strided
view ``keys(layer)[:B, :, :Lmax]`` with a length mask: no gather, no block table. When a request
leaves, the request in the last slot is moved into the hole (one copy of its ``length`` tokens over
all layers at once), so the invariant holds.

Why not paged blocks (vLLM/transformers' continuous batching): on a CPU with a tiny model the cost is
Python ops per step, and paging adds a gather per layer per step; the price of slots is memory
(``max_num_seqs × max_model_len`` tokens reserved up front) and attention over ``Lmax`` for every row.
The cache starts zeroed, and a slot whose request produced NaN is zeroed again: a masked position
still enters the attention matmul, and ``0 · NaN`` would poison the row that inherits the slot.

Sizing (:func:`plan_kv_cache`): the cache gets a memory *budget* (bytes), not a fixed shape. Each slot
holds a whole request of ``max_model_len`` tokens, which is never shortened (a request's length is a
promise to the caller); what the budget limits is how many slots there are, up to ``max_num_seqs``
(a maximum, like vLLM's). So a checkpoint with a 32k context starts on whatever memory the device has,
with fewer concurrent requests, and only a budget too small for a single request is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class KVBudgetError(ValueError):
    """The KV memory budget cannot hold even one request of ``max_model_len`` tokens."""


@dataclass(frozen=True)
class KVPlan:
    num_slots: int
    slot_len: int
    bytes_per_token: int
    budget_bytes: int

    @property
    def nbytes(self) -> int:
        return self.num_slots * self.slot_len * self.bytes_per_token


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V of one token over all layers: ``2 × layers × kv_heads × head_dim × dtype bytes``."""
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def plan_kv_cache(bytes_per_token: int, budget_bytes: int, max_num_seqs: int, max_model_len: int) -> KVPlan:
    """``min(max_num_seqs, budget_tokens // max_model_len)`` slots of ``max_model_len`` tokens each.

    Raises :class:`KVBudgetError` (one line, naming the keys to change) when not one slot fits.
    """
    budget_tokens = budget_bytes // bytes_per_token
    slots = min(max_num_seqs, budget_tokens // max_model_len)
    if slots < 1:
        raise KVBudgetError(
            f"the KV budget of {budget_bytes / 1e9:.3g} GB holds {budget_tokens} tokens "
            f"({bytes_per_token} bytes each), less than one request of max_model_len={max_model_len}; "
            "raise engine.kv_cache_gb or engine.kv_cache_memory_fraction, or lower engine.max_model_len"
        )
    return KVPlan(num_slots=slots, slot_len=max_model_len, bytes_per_token=bytes_per_token, budget_bytes=budget_bytes)


class SlotKVCache:
    def __init__(
        self,
        num_layers: int,
        max_num_seqs: int,
        num_kv_heads: int,
        max_model_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        self.num_layers = num_layers
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.data = torch.zeros(
            num_layers, 2, max_num_seqs, num_kv_heads, max_model_len, head_dim, dtype=dtype, device=device
        )

    def keys(self, layer: int) -> torch.Tensor:
        """``[max_num_seqs, num_kv_heads, max_model_len, head_dim]`` view of one layer's keys."""
        return self.data[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.data[layer, 1]

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``src`` into slot ``dst`` (all layers, K and V)."""
        self.data[:, :, dst, :, :length] = self.data[:, :, src, :, :length]

    def clear(self, slot: int, length: int) -> None:
        """Zero the first ``length`` positions of ``slot``."""
        self.data[:, :, slot, :, :length] = 0.0

    def read(self, slot: int, length: int) -> torch.Tensor:
        """A copy of the first ``length`` positions of ``slot``: ``[num_layers, 2, num_kv_heads, length, head_dim]``."""
        return self.data[:, :, slot, :, :length].clone()

    def write(self, slot: int, kv: torch.Tensor, length: int) -> None:
        """Put the first ``length`` positions of a :meth:`read` result back into ``slot``."""
        self.data[:, :, slot, :, :length] = kv[:, :, :, :length]

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()
