"""A synced LoRA adapter written as a PEFT adapter directory, for engines that apply adapters unmerged (vLLM).

The trainer's adapter tensors arrive named as in PEFT's ``adapter_model.safetensors``; a vLLM replica writes
them, unchanged, next to an ``adapter_config.json`` holding ``r``, ``lora_alpha`` and ``target_modules``, and
vLLM loads the directory as a ``LoRARequest``. Each version gets its own directory, written under a temporary
name and renamed into place, so the engine never reads a half-written adapter.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import save_file

from rollarc.sync.lora import adapter_targets


class LoraShape(Protocol):
    """What an adapter directory records of ``model.lora`` (``rollarc.config.model.LoraConfig`` has it; the
    sync layer sits below the config layer, so it names the fields, not the class)."""

    @property
    def r(self) -> int: ...

    @property
    def alpha(self) -> float: ...

    @property
    def target_modules(self) -> Sequence[str]: ...


def adapter_config(lora: LoraShape, base_path: str) -> dict[str, object]:
    """PEFT's ``adapter_config.json`` for ``lora`` (the fields vLLM's ``PEFTHelper`` reads, as peft writes them)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_path,
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(lora.target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }


def write_adapter_dir(
    root: Path, version: int, adapter: Mapping[str, torch.Tensor], lora: LoraShape, base_path: str
) -> Path:
    """``root/v<version>`` holding ``adapter`` bit for bit; written atomically (a temporary dir, then a rename)."""
    adapter_targets(adapter)  # raises on a tensor that is not an adapter matrix
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"v{version}"
    tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=root))
    try:
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in adapter.items()}
        save_file(tensors, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(adapter_config(lora, base_path), indent=1))
        if final.exists():  # a version written again (a replica re-catching up): replace it whole
            shutil.rmtree(final)
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def remove_adapter_dirs(root: Path, keep: set[Path]) -> list[Path]:
    """Delete every version directory under ``root`` except ``keep``; returns those removed."""
    removed = []
    for path in sorted(root.glob("v*")) if root.exists() else []:
        if path.is_dir() and path not in keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
