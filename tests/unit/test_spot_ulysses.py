"""Ulysses SP pieces that need no second process: the regroup degree, and the SP forward at degree 1."""

import copy

import pytest
import torch

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.ulysses import largest_degree, sp_forward, use_ulysses

VOCAB = ["one", "red", "square", "left", "two", "blue"]


def test_largest_degree_divides_heads_and_tokens():
    assert [largest_degree(m, heads=4, tokens=64) for m in (1, 2, 3, 4, 5, 8)] == [1, 2, 2, 4, 4, 4]
    assert largest_degree(5, heads=6, tokens=64) == 2  # 3 divides the heads but not the tokens
    with pytest.raises(ValueError, match="at least one member"):
        largest_degree(0, 4, 64)


def test_sp_forward_at_degree_one_is_bitwise_the_dit_forward():
    policy = build_policy(VOCAB, 16, 32, 2, 4, seed=0).eval()
    x, t = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([0.8, 0.2])
    with torch.no_grad():
        hidden, mask = policy.encode(["one red square left", "two blue square"])
        reference = policy.velocity(x, t, (hidden, mask))
    transformer = copy.deepcopy(policy.transformer)
    use_ulysses(transformer, 1, None)
    assert torch.equal(sp_forward(transformer, x, t, hidden, mask, 0, 1, None), reference)
