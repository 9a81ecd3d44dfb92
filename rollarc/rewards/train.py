"""``rollarc reward train``: generate labelled episodes, fit the progress judge, save it with its held-out scores.

The held-out split is by episode (the last ``heldout_fraction`` of the generated episodes, whose env
seeds the training split never saw). Loss: binary cross-entropy of the success logit against the
outcome plus binary cross-entropy of the progress logit against the soft progress label.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from rollarc.agent.chat import ChatRenderer
from rollarc.models.checkpoint import load_tokenizer
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rewards.data import Example, generate_examples
from rollarc.rewards.judge import JudgeSpec, ProgressJudge, save_judge, tokenizer_fingerprint

if TYPE_CHECKING:
    from rollarc.config import Config  # type only: the training config is above rewards/


def policy_tokenizer(cfg: Config) -> Any:
    """The tokenizer RL trajectories will carry: the policy's (``model.path``) or rollarc's built-in one."""
    if cfg.model.path is not None:
        return load_tokenizer(cfg.model.path)
    return build_tokenizer()


def _targets(examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
    success = torch.tensor([float(e.success) for e in examples])
    progress = torch.tensor([e.progress for e in examples])
    return success, progress


def evaluate(model: ProgressJudge, examples: list[Example], batch_size: int = 256) -> dict[str, float]:
    """Held-out figures: success accuracy (and the majority-class rate), progress MAE and correlation."""
    model.eval()
    success_prob: list[float] = []
    progress_pred: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            logits = model(*model.encode_batch([e.tokens for e in chunk]))
            success_prob += torch.sigmoid(logits[:, 0]).tolist()
            progress_pred += torch.sigmoid(logits[:, 1]).tolist()
    success, progress = (t.numpy() for t in _targets(examples))
    predicted_success = np.array(success_prob) > 0.5
    majority = max(success.mean(), 1 - success.mean())
    pred = np.array(progress_pred)
    corr = float(np.corrcoef(pred, progress)[0, 1]) if pred.std() > 0 and progress.std() > 0 else float("nan")
    failed = success == 0
    return {
        "examples": len(examples),
        "success_accuracy": float((predicted_success == (success == 1)).mean()),
        "majority_class_accuracy": float(majority),
        "progress_mae": float(np.abs(pred - progress).mean()),
        "progress_mae_failed_episodes": float(np.abs(pred - progress)[failed].mean()) if failed.any() else float("nan"),
        "progress_pearson": corr,
    }


def fit(
    model: ProgressJudge,
    examples: list[Example],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[[str], None] = print,
) -> list[float]:
    """AdamW with a short warm-up and cosine decay; returns the loss of every step."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    ids, pad = model.encode_batch([e.tokens for e in examples])
    success, progress = _targets(examples)
    losses = []
    model.train()
    for step in range(steps):
        index = torch.randint(len(examples), (min(batch_size, len(examples)),), generator=generator)
        logits = model(ids[index], pad[index])
        loss = F.binary_cross_entropy_with_logits(logits[:, 0], success[index]) + F.binary_cross_entropy_with_logits(
            logits[:, 1], progress[index]
        )
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            log(f"  reward judge step {step:4d}  loss {loss.item():.4f}")
    model.eval()
    return losses


def train_reward_model(cfg: Config, log: Callable[[str], None] = print) -> tuple[Path, dict[str, Any]]:
    """Generate data from ``cfg.tasks``, train the judge, save it at the configured path; returns (path, meta)."""
    reward = cfg.reward
    train = reward.train
    torch.manual_seed(train.seed)
    tokenizer = policy_tokenizer(cfg)
    renderer = ChatRenderer(tokenizer)
    arch = train.judge
    t0 = time.perf_counter()
    examples = generate_examples(list(cfg.tasks), renderer, cfg.sampling, train, arch.context_tokens)
    data_s = time.perf_counter() - t0
    cut = round(len(examples) * (1 - train.heldout_fraction))
    train_set, heldout = examples[:cut], examples[cut:]
    if not train_set or not heldout:
        raise ValueError(
            f"reward.train.episodes={train.episodes} gave {len(examples)} usable episodes; "
            "too few for a train/held-out split"
        )
    log(
        f"reward judge: {len(examples)} labelled episodes in {data_s:.1f} s "
        f"({len(train_set)} train, {len(heldout)} held out); training {train.steps} steps"
    )
    spec = JudgeSpec(
        vocab_size=len(tokenizer),
        pad_id=int(tokenizer.pad_token_id),
        context_tokens=arch.context_tokens,
        d_model=arch.d_model,
        heads=arch.heads,
        layers=arch.layers,
        tokenizer_sha256=tokenizer_fingerprint(tokenizer.get_vocab()),
    )
    model = ProgressJudge(spec)
    t1 = time.perf_counter()
    losses = fit(model, train_set, train.steps, train.batch_size, train.lr, train.seed, log=log)
    metrics = evaluate(model, heldout)
    meta = {
        "tasks": [t.name for t in cfg.tasks],
        "train_examples": len(train_set),
        "heldout": metrics,
        "final_loss": losses[-1],
        "data_s": data_s,
        "train_s": time.perf_counter() - t1,
        "parameters": sum(p.numel() for p in model.parameters()),
        "label": "solver-measured progress (rollarc.rewards.labels)",
        "train_config": train.model_dump(),
    }
    path = save_judge(model, reward.resolved_model_path(cfg.name), meta)
    log(
        f"reward judge saved to {path}: held-out success accuracy {metrics['success_accuracy']:.3f} "
        f"(majority class {metrics['majority_class_accuracy']:.3f}), progress MAE {metrics['progress_mae']:.3f}, "
        f"Pearson r {metrics['progress_pearson']:.3f}"
    )
    return path, meta
