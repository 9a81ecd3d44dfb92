"""Supervised warm start: behaviour cloning of solver demonstrations on assistant tokens only."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rollarc.agent.trajectory import Trajectory
from rollarc.algo.logprobs import token_logprobs
from rollarc.algo.masking import masked_mean
from rollarc.train.batch import TrainBatch, build_batch


@dataclass
class SFTResult:
    steps: int
    final_loss: float
    seconds: float
    rows: int
    target_tokens: int


def sft_rows(demos: list[Trajectory], pad_id: int) -> TrainBatch:
    """All demonstration segments as one padded batch (advantages unused)."""
    return build_batch([[d] for d in demos], advantage_kind="dr_grpo", eps=1e-6, pad_id=pad_id)


def nll_loss(model: PreTrainedModel, batch: TrainBatch) -> torch.Tensor:
    """Mean negative log-likelihood of the assistant target tokens (token mean)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    logp = token_logprobs(logits, batch.input_ids[:, 1:])
    return -masked_mean(logp, batch.loss_mask.bool())


def train_sft(
    model: PreTrainedModel,
    demos: list[Trajectory],
    pad_id: int,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float = 0.0,
    warmup_steps: int = 10,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> SFTResult:
    """Adam on random minibatches of demonstration rows, linear warmup then cosine decay to 10%."""
    if steps == 0:  # sft.steps: 0 keeps the initial weights (and may come with no demonstrations)
        return SFTResult(steps=0, final_loss=float("nan"), seconds=0.0, rows=0, target_tokens=0)
    data = sft_rows(demos, pad_id)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    start = time.perf_counter()
    loss_value = float("nan")
    for step in range(steps):
        index = torch.tensor(rng.sample(range(data.num_rows), min(batch_size, data.num_rows)))
        loss = nll_loss(model, data.rows(index))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}; stopping before the weights break")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        loss_value = float(loss.item())
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return SFTResult(
        steps=steps,
        final_loss=loss_value,
        seconds=time.perf_counter() - start,
        rows=data.num_rows,
        target_tokens=data.num_target_tokens,
    )
