"""Shard-aware routing: a receiver declares which slice of each tensor it holds, and is sent only that.

A tensor-parallel engine rank holds a row block (split along dim 0) or a column block (dim 1) of
most weight matrices, and whole copies of the small ones (norms). ``ShardSpec`` records that as
``{tensor_name: Split(dim, rank, world)}``; tensors it does not name are held whole. The sender
encodes deltas between *shards* of consecutive versions, so checksums, bucket bounds and
bit-exactness hold per shard exactly as for whole tensors.

Slices follow ``torch.tensor_split``: when a dimension does not divide evenly, the first ranks hold
one extra row or column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Split:
    """Rank ``rank`` of ``world`` equal-as-possible slices along dimension ``dim``."""

    dim: int
    rank: int
    world: int

    def __post_init__(self) -> None:
        if self.world < 1:
            raise ValueError(f"Split.world must be >= 1, got {self.world}")
        if not 0 <= self.rank < self.world:
            raise ValueError(f"Split.rank must be in [0, {self.world}), got {self.rank}")
        if self.dim < 0:
            raise ValueError(f"Split.dim must be >= 0, got {self.dim}")


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """What one receiver holds; hashable, so receivers with the same layout share one encoded stream.

    ``ShardSpec()`` (no splits) is the whole model.
    """

    splits: tuple[tuple[str, Split], ...] = ()

    @staticmethod
    def of(mapping: Mapping[str, Split | tuple[int, int, int]]) -> ShardSpec:
        """Build from ``{name: Split}`` or ``{name: (dim, rank, world)}``."""
        items = []
        for name, split in mapping.items():
            if not isinstance(split, Split):
                if len(split) != 3:
                    raise ValueError(f"shard of {name!r} must be (dim, rank, world), got {split!r}")
                split = Split(*split)
            items.append((name, split))
        return ShardSpec(tuple(sorted(items)))

    @property
    def whole(self) -> bool:
        return not self.splits

    def split_of(self, name: str) -> Split | None:
        return dict(self.splits).get(name)

    def describe(self) -> str:
        if self.whole:
            return "whole model"
        ranks = sorted({(s.rank, s.world) for _, s in self.splits})
        return ", ".join(f"rank {r}/{w}" for r, w in ranks) + f" of {len(self.splits)} tensors"


def extract_shard(tensor: torch.Tensor, split: Split, name: str = "tensor") -> torch.Tensor:
    """The contiguous slice ``split`` of ``tensor`` (a view when the slice is already contiguous)."""
    if split.dim >= tensor.dim():
        raise ValueError(f"{name}: cannot split dim {split.dim} of a {tensor.dim()}-d tensor {tuple(tensor.shape)}")
    return tensor.tensor_split(split.world, dim=split.dim)[split.rank].contiguous()


def shard_state(state: Mapping[str, torch.Tensor], spec: ShardSpec) -> dict[str, torch.Tensor]:
    """Every tensor of ``state``, sliced where ``spec`` says; whole where it does not."""
    unknown = [name for name, _ in spec.splits if name not in state]
    if unknown:
        raise ValueError(f"shard spec names tensors the model does not have: {unknown[:5]}")
    splits = dict(spec.splits)
    return {
        name: extract_shard(tensor, splits[name], name) if name in splits else tensor for name, tensor in state.items()
    }


# Llama-family projections: column-parallel ones split their output features (dim 0 of the
# [out, in] weight), row-parallel ones their input features (dim 1); embeddings are vocab-parallel.
_COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens", "lm_head")
_ROW_PARALLEL = ("o_proj", "down_proj")


def llama_tensor_parallel(names: Iterable[str], rank: int, world: int) -> ShardSpec:
    """The Megatron-style tensor-parallel layout of rank ``rank`` for a Llama-family state dict.

    Rows of K/V projections are split evenly like the others; an engine that replicates KV heads
    when ``world`` exceeds their number declares its own ``ShardSpec`` instead.
    """
    splits: dict[str, Split] = {}
    for name in names:
        parts = name.split(".")
        if any(part in _COLUMN_PARALLEL for part in parts):
            splits[name] = Split(0, rank, world)
        elif any(part in _ROW_PARALLEL for part in parts) and name.endswith("weight"):
            splits[name] = Split(1, rank, world)
    return ShardSpec.of(splits)
