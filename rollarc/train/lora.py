"""The trainer's side of ``model.lora``: wrap the policy with peft adapters, and read, save and load them.

Only the adapter matrices are trainable; the base weights stay frozen and are never published again. The
adapter's tensors go to weight sync under the names of PEFT's own saved adapter (``get_peft_model_state_dict``),
so what a rollout replica merges (``rollarc.sync.lora``) and what a checkpoint holds (``adapter_config.json`` +
``adapter_model.safetensors``, loadable by ``peft.PeftModel.from_pretrained``) are the same tensors.
"""

from __future__ import annotations

import copy
from pathlib import Path

import peft
import torch
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import PreTrainedModel

from rollarc.config import LoraConfig
from rollarc.models.checkpoint import ADAPTER_DIR as ADAPTER_DIR  # re-exported: the train worker imports it here

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_targets(model: torch.nn.Module, targets: list[str]) -> None:
    """One-line ``ValueError`` naming each target that matches no linear layer of ``model``."""
    linear = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    missing = [t for t in targets if t not in linear]
    if missing:
        raise ValueError(
            f"model.lora.target_modules {missing} match no linear layer of the policy; it has {sorted(linear)}"
        )


def apply_lora(model: PreTrainedModel, cfg: LoraConfig, seed: int) -> peft.PeftModel:
    """``model`` wrapped with fresh adapters (A random from ``seed``, B zero: the policy starts unchanged)."""
    check_targets(model, cfg.target_modules)
    lora = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # peft annotates int, computes alpha / r in float
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type=peft.TaskType.CAUSAL_LM,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapped = peft.get_peft_model(model, lora)
    return wrapped


def adapter_state(model: peft.PeftModel) -> dict[str, torch.Tensor]:
    """The adapter tensors on the CPU, named as in ``adapter_model.safetensors`` (what weight sync sends)."""
    return {name: t.detach().cpu() for name, t in get_peft_model_state_dict(model).items()}


def merged_weights(model: peft.PeftModel) -> dict[str, torch.Tensor]:
    """The effective policy weights (base with the adapters merged by peft), on the CPU; ``model`` is unchanged."""
    merged = copy.deepcopy(model).merge_and_unload()
    return {name: t.detach().cpu() for name, t in merged.state_dict().items()}


def save_adapter(model: peft.PeftModel, directory: str | Path) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors`` in ``directory`` (peft's own writer)."""
    model.save_pretrained(str(directory), safe_serialization=True)


def load_adapter(model: peft.PeftModel, directory: str | Path) -> None:
    """Load a saved adapter's tensors into ``model`` in place; every adapter tensor must be in the file."""
    state = load_file(str(Path(directory) / ADAPTER_WEIGHTS))
    expected = set(get_peft_model_state_dict(model))
    if set(state) != expected:
        raise ValueError(
            f"{directory}: adapter tensors do not match model.lora (missing {sorted(expected - set(state))[:3]}, "
            f"unexpected {sorted(set(state) - expected)[:3]})"
        )
    set_peft_model_state_dict(model, state)  # the names were checked above: every one is loaded


def merge_saved_adapter(model: PreTrainedModel, adapter_dir: str | Path) -> PreTrainedModel:
    """``model`` (the base) with a saved PEFT adapter merged in, by peft itself."""
    merged = peft.PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    assert isinstance(merged, PreTrainedModel)
    return merged
