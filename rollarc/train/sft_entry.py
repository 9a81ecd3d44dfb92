"""``rollarc sft CONFIG``: demonstrations -> behaviour cloning -> an HF-format checkpoint (+ its held-out score)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.local_eval import evaluate_local
from rollarc.config import Config, load_train_config
from rollarc.config.plugin_path import plugin_pythonpath
from rollarc.models.checkpoint import load_policy, new_policy, remove_partial_directories, save_policy
from rollarc.train.demos import demonstrations
from rollarc.train.preflight import preflight_sft
from rollarc.train.sft import train_sft
from rollarc.train.sft_settings import sft_settings

SFT_META = "sft_meta.json"


def run_sft(cfg: Config, log: Callable[[str], None] = print) -> Path:
    """Train the warm start and save it at ``cfg.sft.checkpoint``; returns that directory."""
    torch.set_num_threads(cfg.sft.threads)
    torch.manual_seed(cfg.seed)
    plugin_pythonpath(cfg.plugin_paths)
    target = cfg.sft_checkpoint()
    if cfg.model.path is not None:
        model, tokenizer = load_policy(cfg.model.path)
    else:
        model, tokenizer = new_policy(cfg.model.preset, cfg.model.max_position_embeddings, seed=cfg.model.init_seed)
    renderer = ChatRenderer(tokenizer)
    t0 = time.perf_counter()
    # sft.steps: 0 trains nothing, so it needs no demonstrations (nor an env with an expert to make them).
    demos = (
        demonstrations(list(cfg.tasks), cfg.sft.episodes, cfg.sft.seed_base, renderer, cfg.sampling)
        if cfg.sft.steps > 0
        else []
    )
    demo_s = time.perf_counter() - t0
    log(f"SFT: {len(demos)} demonstrations in {demo_s:.1f} s; training {cfg.sft.steps} steps")

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == cfg.sft.steps - 1:
            log(f"  sft step {step:4d}  loss {loss:.4f}")

    result = train_sft(
        model,
        demos,
        tokenizer.pad_token_id,
        cfg.sft.steps,
        cfg.sft.batch_size,
        cfg.sft.lr,
        cfg.sft.weight_decay,
        cfg.sft.warmup_steps,
        seed=cfg.seed,
        on_step=on_step,
    )
    meta: dict[str, Any] = {
        "steps": result.steps,
        "episodes": len(demos),
        "final_loss": result.final_loss,
        "train_s": result.seconds,
        "demo_s": demo_s,
        "rows": result.rows,
        "target_tokens": result.target_tokens,
        "lr": cfg.sft.lr,
        "batch_size": cfg.sft.batch_size,
        "settings": sft_settings(cfg),  # compared when a run reuses this warm start (preflight)
    }
    if cfg.sft.eval_episodes:
        # SFT trains and evaluates its float32 model on the CPU, whatever the engine's dtype for RL.
        score = evaluate_local(
            model,
            tokenizer,
            list(cfg.tasks),
            cfg.sft.eval_episodes,
            cfg.train.eval_seed_base,
            cfg.sampling,
            cfg.engine.model_copy(update={"dtype": None, "num_threads": cfg.sft.threads}),
        )
        meta["heldout_success"] = score["success"]
        meta["heldout_episodes"] = score["episodes"]
        log(f"SFT held-out success {score['success']:.3f} on {score['episodes']} episodes")
    save_policy(model, tokenizer, target, extra_files={SFT_META: json.dumps(meta, indent=1)})
    return target


def read_sft_meta(path: Path) -> dict[str, Any] | None:
    meta = Path(path) / SFT_META
    return json.loads(meta.read_text()) if meta.is_file() else None


def sft_main(config_path: str, overrides: list[str]) -> int:
    cfg = load_train_config(config_path, overrides)
    plugin_pythonpath(cfg.plugin_paths)
    preflight_sft(cfg, warn=lambda m: print(m, file=sys.stderr))
    remove_partial_directories(cfg.sft_checkpoint().parent, cfg.sft_checkpoint().name)
    path = run_sft(cfg)
    print(path)
    return 0
