"""A rank of the two-process Ulysses check in test_t2i_device.py, in a module of its own so that each spawned
process imports only torch and the DiT (not the test module's Ray imports)."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.ulysses import sp_forward, use_ulysses

VOCAB = ["one", "red", "square", "left", "two", "blue"]


def staged_rank(rank: int, store_path: str, out: str) -> None:
    """The SP forward at degree 2, plain and CPU-staged, and the full-sequence reference; rank 0 saves them."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    try:
        policy = build_policy(VOCAB, 16, 32, 2, 4, seed=0).eval()
        x, t = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([0.8, 0.2])
        with torch.no_grad():
            hidden, mask = policy.encode(["one red square left", "two blue square"])
            reference = policy.velocity(x, t, (hidden, mask))
        outs = []
        for staged in (False, True):
            transformer = copy.deepcopy(policy.transformer)
            use_ulysses(transformer, 2, None, staged)
            outs.append(sp_forward(transformer, x, t, hidden, mask, rank, 2, None, staged))
        if rank == 0:
            torch.save({"reference": reference, "plain": outs[0], "staged": outs[1]}, out)
    finally:
        dist.destroy_process_group()
