"""Shard specs: which slice a tensor-parallel receiver holds, extracted exactly, and deltas between shards."""

from __future__ import annotations

import pytest
import torch

from rollarc.models import new_policy
from rollarc.sync.codec import apply_delta, encode_delta
from rollarc.sync.shard import ShardSpec, Split, extract_shard, llama_tensor_parallel, shard_state


def grid(rows: int, cols: int) -> torch.Tensor:
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)


def test_row_split_takes_a_row_block():
    assert extract_shard(grid(4, 6), Split(0, 1, 2)).tolist() == [[12, 13, 14, 15, 16, 17], [18, 19, 20, 21, 22, 23]]


def test_column_split_takes_a_column_block_and_is_contiguous():
    shard = extract_shard(grid(2, 6), Split(1, 2, 3))
    assert shard.tolist() == [[4, 5], [10, 11]]
    assert shard.is_contiguous()


def test_uneven_split_gives_first_ranks_one_more():
    sizes = [extract_shard(grid(5, 3), Split(0, r, 2)).shape[0] for r in range(2)]
    assert sizes == [3, 2]


@pytest.mark.parametrize("dim, world", [(0, 3), (1, 4), (2, 2)])
def test_shards_of_all_ranks_reassemble_the_tensor(dim, world):
    tensor = torch.arange(6 * 8 * 5, dtype=torch.float32).reshape(6, 8, 5)
    parts = [extract_shard(tensor, Split(dim, r, world)) for r in range(world)]
    assert torch.equal(torch.cat(parts, dim=dim), tensor)


def test_spec_is_hashable_order_independent_and_validated():
    a = ShardSpec.of({"x": (0, 0, 2), "y": Split(1, 0, 2)})
    b = ShardSpec.of({"y": (1, 0, 2), "x": (0, 0, 2)})
    assert a == b and hash(a) == hash(b) and a.split_of("x") == Split(0, 0, 2) and a.split_of("z") is None
    with pytest.raises(ValueError, match="rank must be in"):
        Split(0, 2, 2)
    with pytest.raises(ValueError, match="world must be"):
        Split(0, 0, 0)
    with pytest.raises(ValueError, match=r"\(dim, rank, world\)"):
        ShardSpec.of({"x": (0, 1)})


def test_shard_state_errors_name_the_tensor():
    state = {"w": grid(4, 4), "norm": torch.ones(4)}
    with pytest.raises(ValueError, match="does not have: \\['missing'\\]"):
        shard_state(state, ShardSpec.of({"missing": (0, 0, 2)}))
    with pytest.raises(ValueError, match="norm: cannot split dim 1"):
        shard_state(state, ShardSpec.of({"norm": (1, 0, 2)}))
    shards = shard_state(state, ShardSpec.of({"w": (1, 1, 2)}))
    assert shards["w"].tolist() == [[2, 3], [6, 7], [10, 11], [14, 15]]
    assert shards["norm"] is state["norm"]


def test_llama_layout_splits_projections_and_keeps_norms_whole():
    model, _ = new_policy("nano")
    names = [n for n, _ in model.named_parameters()]
    spec = llama_tensor_parallel(names, rank=1, world=2)
    assert spec.split_of("model.layers.0.self_attn.q_proj.weight") == Split(0, 1, 2)
    assert spec.split_of("model.layers.0.mlp.down_proj.weight") == Split(1, 1, 2)
    assert spec.split_of("model.layers.1.self_attn.o_proj.weight") == Split(1, 1, 2)
    assert spec.split_of("model.embed_tokens.weight") == Split(0, 1, 2)
    assert spec.split_of("model.norm.weight") is None
    state = {n: p.detach() for n, p in model.named_parameters()}
    shards = shard_state(state, spec)
    assert shards["model.layers.0.mlp.down_proj.weight"].shape == (64, 64)  # [hidden, intermediate / 2]


def test_delta_between_shards_rebuilds_the_shard_of_the_new_version():
    gen = torch.Generator().manual_seed(0)
    old = {"w": torch.randn(64, 48, generator=gen).to(torch.bfloat16), "b": torch.randn(48, generator=gen)}
    new = {"w": old["w"].clone(), "b": old["b"] + 1}
    new["w"][::7, ::5] += 1
    spec = ShardSpec.of({"w": (1, 1, 3)})
    shard_old = {n: t.clone() for n, t in shard_state(old, spec).items()}
    buckets = list(encode_delta(shard_state(old, spec), shard_state(new, spec)))
    apply_delta(shard_old, buckets)
    assert torch.equal(shard_old["w"].view(torch.int16), extract_shard(new["w"], Split(1, 1, 3)).view(torch.int16))
    assert torch.equal(shard_old["b"], new["b"])
    assert sum(b.model_bytes for b in buckets) == 64 * 16 * 2 + 48 * 4
