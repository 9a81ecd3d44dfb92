"""What an SFT warm start was trained with, recorded in its ``sft_meta.json`` and compared when a run reuses it.

``sft.checkpoint`` is reused whenever it holds a model, so a config whose SFT settings changed (more steps, another
learning rate, another preset or seed, another env of the same task name) would silently start RL from a warm start
made for other settings, and its held-out gain would be measured from the wrong start. The recorded settings are those that change the weights SFT
produces; a warm start recorded before this existed has none, and is reused as before.
"""

from __future__ import annotations

from typing import Any

SFT_KEYS = ("episodes", "steps", "batch_size", "lr", "weight_decay", "warmup_steps", "seed_base")
MODEL_KEYS = ("preset", "max_position_embeddings", "init_seed")


def sft_settings(cfg: Any) -> dict[str, Any]:
    """The settings that decide the weights SFT trains (``cfg``: a train :class:`~rollarc.config.Config`)."""
    settings: dict[str, Any] = {f"sft.{k}": getattr(cfg.sft, k) for k in SFT_KEYS}
    settings |= {f"model.{k}": getattr(cfg.model, k) for k in MODEL_KEYS}
    settings["model.path"] = cfg.model.path  # SFT from a given model instead of a fresh preset
    settings["seed"] = cfg.seed
    settings["tasks"] = [task.name for task in cfg.tasks]
    # the env and its kwargs decide the demonstrations (a long_reply task trained on `copy` is no start for `repeat`)
    settings["task_envs"] = [task.env_spec.model_dump(mode="json") for task in cfg.tasks]
    return settings


def changed_settings(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for every recorded setting the current config changes, in key order."""
    return [
        f"{key}: {recorded[key]!r} -> {current.get(key)!r}"
        for key in sorted(recorded)
        if key in current and recorded[key] != current[key]
    ]
