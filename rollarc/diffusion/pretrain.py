"""Pretraining the DiT by flow matching (rectified flow) on rendered ground truth of the train prompts.

The tasks render 16×16; a model at a multiple of that (``model.image_size: 32``) learns the rendering scaled
up, each task pixel a block. Loss: ``‖v_θ(x_t, t) − (ε − x_0)‖²`` with ``x_t = (1 − t) x_0 + t ε`` and ``t`` drawn logit-normal
(SD3's sampling of t, which weights the middle of the path). Only train-split prompts are rendered, so
held-out prompts are new combinations at evaluation. It stops after ``pretrain.steps`` on purpose: the
base draws roughly the right thing, imperfectly, and RL has headroom.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.model import T2IPolicy, build_policy
from rollarc.diffusion.tasks.base import Task, split, upscale
from rollarc.diffusion.tasks.registry import vocabulary

META = "rollarc_t2i.json"


def train_prompts(tasks: list[Task]) -> list[tuple[Task, str]]:
    return [(task, p) for task in tasks for p in split(task.prompts())[0]]


def pretrain(cfg: T2IConfig, tasks: list[Task], log: Callable[[str], None] = print) -> T2IPolicy:
    pc, mc = cfg.pretrain, cfg.model
    torch.set_num_threads(mc.threads)
    policy = build_policy(vocabulary(tasks), mc.image_size, mc.width, mc.layers, mc.heads, pc.seed)
    rng = random.Random(pc.seed)
    gen = torch.Generator().manual_seed(pc.seed)
    pool = train_prompts(tasks)
    opt = torch.optim.AdamW(policy.parameters(), lr=pc.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    for step in range(pc.steps):
        batch = [pool[rng.randrange(len(pool))] for _ in range(pc.batch_size)]
        rendered = [upscale(t.render(p, rng), mc.image_size) for t, p in batch]
        x0 = torch.from_numpy(np.stack(rendered)).permute(0, 3, 1, 2) * 2 - 1
        eps = torch.randn(x0.shape, generator=gen)
        t = torch.sigmoid(torch.randn(len(batch), generator=gen))
        xt = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * eps
        pred = policy.velocity(xt, t, policy.encode([p for _, p in batch]))
        loss = ((pred - (eps - x0)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == pc.steps - 1:
            log(f"pretrain step {step}/{pc.steps}: flow-matching loss {loss.item():.4f}")
    return policy


def load_or_pretrain(cfg: T2IConfig, tasks: list[Task], log: Callable[[str], None] = print) -> Path:
    """The cached pretrained base directory, pretrained first if missing."""
    out = cfg.pretrained_dir()
    if (out / "transformer" / "config.json").is_file():
        return out
    log(f"no pretrained base at {out}: pretraining by flow matching ({cfg.pretrain.steps} steps)")
    policy = pretrain(cfg, tasks, log)
    out.parent.mkdir(parents=True, exist_ok=True)
    policy.save(out)
    (out / META).write_text(json.dumps({"pretrain": cfg.pretrain.model_dump(), "tasks": cfg.tasks}, indent=1))
    return out
