"""Which device and dtype a role computes on, from the config's names (``auto``/``cpu``/``cuda``, ``float32``/``bfloat16``).

The names are resolved where the work runs (inside each Ray actor), not on the driver: a driver on a
CPU-only head node resolves ``auto`` to the CPU while the actor it starts on a GPU node sees its GPU.
A Ray actor that asked for ``num_gpus`` sees only its own devices (Ray sets ``CUDA_VISIBLE_DEVICES``),
so ``cuda`` always means ``cuda:0`` of what the process can see.
"""

from __future__ import annotations

from typing import Literal

import psutil
import torch

DeviceName = Literal["auto", "cpu", "cuda"]
DtypeName = Literal["float32", "bfloat16"]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class DeviceUnavailableError(RuntimeError):
    """The config asks for a device this process cannot see."""


def resolve_device(name: DeviceName | str) -> torch.device:
    """``auto`` = ``cuda:0`` when CUDA is available, else the CPU; ``cuda`` without a GPU is a one-line error."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "auto":
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                "model.device is 'cuda' but this process sees no CUDA device "
                "(torch.cuda.is_available() is False); use model.device=auto or cpu, "
                "or place the role on a GPU pool"
            )
        return torch.device("cuda:0")
    raise ValueError(f"unknown device {name!r}; allowed: auto, cpu, cuda")


def resolve_dtype(name: DtypeName | str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for new allocations now: ``torch.cuda.mem_get_info`` on CUDA, available RAM on the CPU."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)

    return int(psutil.virtual_memory().available)
