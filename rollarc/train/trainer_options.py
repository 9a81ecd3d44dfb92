"""The trainer's settings from a run config, in one place.

The Ray TrainWorker, the FSDP ranks, the in-process reference loop and the HF-``generate`` baseline all
build a trainer; four hand-copied argument lists had already drifted (the baseline had no lr decay).
"""

from __future__ import annotations

from typing import Any

from rollarc.config import Config
from rollarc.models.device import resolve_device, resolve_dtype


def trainer_options(cfg: Config, pad_id: int) -> dict[str, Any]:
    """Keyword arguments of ``PolicyTrainer`` (after the model, ``cfg.algo`` and the lr) for ``cfg``."""
    t = cfg.train
    return {
        "temperature": cfg.sampling.temperature,
        "weight_decay": t.weight_decay,
        "betas": t.betas,
        "grad_clip": t.grad_clip,
        "minibatches": t.minibatches,
        "epochs": t.epochs,
        "micro_batch_tokens": t.micro_batch_tokens,
        "pad_id": pad_id,
        "seed": cfg.seed,
        "dedup": t.dedup_rows,
        "warmup_steps": t.warmup_steps,
        "lr_decay": t.lr_decay,
        "total_steps": t.steps,
        "lr_min_ratio": t.lr_min_ratio,
        "device": resolve_device(cfg.model.device),
        "autocast_dtype": resolve_dtype(cfg.model.dtype),
        "max_staleness": cfg.async_.max_staleness,
    }
