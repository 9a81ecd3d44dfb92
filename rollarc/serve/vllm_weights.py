"""Weights into a running vLLM engine without a file: packing, and the worker-side loader.

vLLM runs its model in a worker process of its own (the engine core spawns it), so new weights reach it through
``AsyncLLM.collective_rpc`` as method arguments. Those travel by msgpack, which sends a tensor as a nested list,
so each tensor crosses as its raw bytes with its dtype and shape (``pack`` / ``unpack``): exact for every dtype,
bfloat16 included, and one copy.

:class:`WeightLoader` is a vLLM *worker extension* (engine argument ``worker_extension_cls``): vLLM mixes its
methods into the worker, and ``collective_rpc("rollarc_load", ...)`` calls them there. Loading goes through
vLLM's layerwise reload (``initialize_layerwise_reload`` / ``finalize_layerwise_reload``, what its own NCCL weight
transfer engine runs), because backends repack weights after loading (the CPU backend fuses and re-lays out
``qkv_proj``), so a plain ``load_weights`` into the running model finds no loader on the repacked parameters.
Layerwise reload processes a layer once all of its checkpoint tensors arrived, so every update sends them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import xxhash

# name -> (raw bytes, dtype name as in torch.<name>, shape)
Packed = dict[str, tuple[bytes, str, list[int]]]


def pack(named: Mapping[str, torch.Tensor]) -> Packed:
    """Each tensor as its bytes (CPU, contiguous), dtype name and shape."""
    out: Packed = {}
    for name, tensor in named.items():
        t = tensor.detach().to("cpu").contiguous()
        out[name] = (t.view(torch.uint8).numpy().tobytes(), str(t.dtype).removeprefix("torch."), list(t.shape))
    return out


def unpack(packed: Packed) -> list[tuple[str, torch.Tensor]]:
    """The inverse of :func:`pack`, bit for bit (the tensors own their memory)."""
    named = []
    for name, (raw, dtype, shape) in packed.items():
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        named.append((name, flat.view(getattr(torch, dtype)).reshape(shape)))
    return named


def digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """One hash of names, dtypes, shapes and bytes: equal digests mean bitwise-equal weights."""
    h = xxhash.xxh64()
    for name, tensor in sorted(named, key=lambda item: item[0]):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class WeightLoader:
    """Mixed into vLLM's worker (``worker_extension_cls``); ``self`` is that worker (``model_runner``, ...)."""

    model_runner: Any
    model_config: Any

    def rollarc_load(self, packed: Packed) -> dict[str, Any]:
        """Load a full set of checkpoint-format tensors into the running model; returns what was loaded."""
        from vllm.model_executor.model_loader.reload import (  # deferred: vLLM, optional, loaded in its worker only
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        named = unpack(packed)
        model = self.model_runner.model
        initialize_layerwise_reload(model)
        model.load_weights(weights=iter(named))
        finalize_layerwise_reload(model, self.model_config)
        return {"tensors": len(named), "digest": digest(named)}

    def rollarc_params(self, names: list[str]) -> Packed:
        """The worker's current parameters of these names (those a backend keeps in checkpoint layout)."""
        params = dict(self.model_runner.model.named_parameters())
        return pack({name: params[name] for name in names if name in params})
