"""FSDP2 building blocks in plain torch.distributed: join a process group, shard a model, gather and save it.

The model is an ordinary HF causal LM. ``shard_model`` applies ``fully_shard`` to each decoder layer (the
classes HF lists in ``_no_split_modules``) and then to the root, which takes the embeddings, the final
norm and the (tied) LM head; parallelism is applied to a plain model, not baked into it. Gradients are
*summed* across ranks (divide factor 1): each rank scales its own loss by the whole minibatch's
normaliser, so the sum is the one-rank gradient. No Ray here; the runtime starts one process per rank.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

SHARDED_DIR = "sharded"  # the DCP sub-directory of a checkpoint


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on this host now (the rendezvous of a new process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def backend_for(device: torch.device) -> str:
    """gloo on the CPU; on GPUs NCCL for CUDA tensors and gloo for the small CPU ones (flags, statistics)."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def init_process_group(
    rank: int, world_size: int, address: str, port: int, device: torch.device, timeout_s: float = 600.0
) -> None:
    """Join the training process group at ``tcp://address:port`` (rank 0 hosts the rendezvous store)."""
    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a process group")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend_for(device),
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of an HF model (``_no_split_modules``, e.g. ``LlamaDecoderLayer``), in order."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} names no decoder-layer class in _no_split_modules; cannot shard it layer by layer"
        )
    return layers


def shard_model(model: nn.Module, *, reshard_after_forward: bool = True) -> FSDPModule:
    """Apply FSDP2 in place: each decoder layer, then the root; gradients are summed across ranks.

    ``reshard_after_forward`` frees each layer's gathered weights after its forward pass (less memory, one
    more all-gather in the backward pass); the root is never resharded after forward (it is needed first
    in the backward pass anyway).
    """
    device = next(model.parameters()).device
    mesh = dist.device_mesh.init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    assert isinstance(model, FSDPModule)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return model


def local_tensor(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor: the full value of a (replicated) DTensor, the tensor itself otherwise."""
    return value.full_tensor() if isinstance(value, DTensor) else value


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU, on rank 0 (an empty dict elsewhere); every rank must call it."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}


def save_sharded(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the model and the optimiser state under ``path`` (torch DCP)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path))


def load_sharded(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read back what ``save_sharded`` wrote, resharded to this process group's layout if it differs."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
