"""A bitwise fingerprint of a model's weights, so a server and a trainer can prove they hold the same ones."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and raw bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
