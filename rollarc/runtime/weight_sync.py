"""Versioned weight publication through the Ray object store.

The TrainWorker puts the new weights into the object store once, in buckets of bounded size, and hands
out a small ``SyncPayload`` of references. Every RolloutWorker fetches the buckets itself (on one node
they are read from shared memory; across nodes Ray moves them once per node), then swaps them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray
import torch


@dataclass
class SyncPayload:
    version: int
    method: str
    refs: list[Any] = field(default_factory=list)
    nbytes: int = 0
    tensors: int = 0


def bucketize(named: dict[str, torch.Tensor], bucket_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Split a state dict into buckets of at most ``bucket_bytes`` (a tensor larger than that is alone)."""
    buckets: list[dict[str, torch.Tensor]] = []
    current: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in named.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > bucket_bytes:
            buckets.append(current)
            current, size = {}, 0
        current[name] = tensor.detach().contiguous()
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def publish_full(named: dict[str, torch.Tensor], version: int, bucket_bytes: int) -> SyncPayload:
    """Put the full weights into the object store once; receivers fetch the buckets by reference."""
    buckets = bucketize(named, bucket_bytes)
    refs = [ray.put(bucket) for bucket in buckets]
    nbytes = sum(t.numel() * t.element_size() for t in named.values())
    return SyncPayload(version=version, method="full", refs=refs, nbytes=nbytes, tensors=len(named))


def receive_full(buckets: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    named: dict[str, torch.Tensor] = {}
    for bucket in buckets:
        named.update(bucket)
    return named
