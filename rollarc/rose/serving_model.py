"""The serving model S's engine, built from a ``serving:`` section.

Its own module, below the runtime: what S is belongs to ``rollarc.rose``; the co-serving Ray replica
(``runtime/coserving_replica.py``, which ``rollarc train``, ``rollarc bench rose`` and ``rollarc loadgen`` all
run) builds it from here.
"""

from __future__ import annotations

import torch

from rollarc.config.harvest import ServingModelConfig
from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.models.checkpoint import load_policy
from rollarc.models.presets import build_model


def engine_of(cfg: ServingModelConfig, device: torch.device | None = None) -> LLMEngine:
    """The serving engine S of ``cfg``: a fresh preset with its own seed, or a checkpoint (no prefix cache: serving
    requests share no prefix), on ``device`` (None: the CPU), where the co-serving replica's policy lives too."""
    if cfg.checkpoint is not None:
        model, _ = load_policy(cfg.checkpoint)
    else:
        model = build_model(cfg.preset, cfg.vocab_size, cfg.max_model_len, seed=cfg.seed)
    if device is not None:
        model = model.to(device)  # type: ignore[arg-type]  # transformers' typed .to rejects a device
    engine_cfg = EngineConfig(
        max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len, prefix_cache_tokens=0, num_threads=None
    )
    return LLMEngine(model, engine_cfg)
