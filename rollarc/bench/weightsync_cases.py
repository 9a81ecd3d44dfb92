"""The cases ``rollarc bench weightsync`` measures: cross-site bytes per step through the training relay.

One case per shipped training config that syncs sparse deltas or borrows a site (``sync.method: delta`` or
``harvest:`` in ``configs/*.yaml``), at its ``train.lr``, ``sync`` settings and AdamW settings, on its model preset;
a config whose model is a checkpoint path (not in the repository) runs on :data:`STAND_IN`, a randomly initialised
Qwen2 of Qwen2.5-0.5B's shape, the largest that fits a 2-core, 24 GB machine. Plus a fine-tuning lr (1e-6) on
:data:`STAND_IN` and, for reference, on the tiny preset. Cases with the same model and settings are measured once.

Each case takes real AdamW steps (fp32 master weights, gradients clipped as in training) on a language-model loss,
publishes every version through the trainer's ``WeightPublisher`` and relays it into an :class:`InProcessSite`
(the site's shape: ``harvest.replicas`` / ``harvest.fanout``, else :data:`DEFAULT_SITE`).
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import yaml

from rollarc.bench.relay_site import InProcessSite
from rollarc.config import load_train_config
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher, updates_nbytes

STAND_IN = "qwen2-0.5b"  # Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads), random weights
QUICK_STAND_IN = "qwen2-nano"  # the same architecture, small enough for a smoke test
QWEN2_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
)
QWEN2_SHAPES: dict[str, tuple[int, ...]] = {  # QWEN2_FIELDS in order
    STAND_IN: (896, 24, 14, 2, 4864, 151936),
    QUICK_STAND_IN: (64, 2, 4, 2, 128, 1000),
}
FINE_TUNING_LR = 1e-6
DEFAULT_SITE = (2, 2)  # members, fanout: configs/harvest.yaml's site, for configs without `harvest:`
QWEN2_BATCH = (1, 32)  # random tokens per step: sequences x length (fp32 0.5B + AdamW is ~8 GB already)
TEXT_BATCH = (8, 128)  # arithmetic lines per step for the character-level presets


@dataclass(frozen=True)
class Case:
    name: str  # where it comes from: a config path, or "fine-tuning lr"
    model: str  # a rollarc preset or a key of QWEN2_SHAPES
    lr: float
    sync: SyncConfig
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    members: int = DEFAULT_SITE[0]
    fanout: int = DEFAULT_SITE[1]
    max_position_embeddings: int = 1024
    reference: bool = False  # shown for comparison in the docs, not in the README's row

    def key(self) -> tuple[Any, ...]:
        """Cases with equal keys measure the same thing."""
        return (self.model, self.lr, self.sync, self.weight_decay, self.betas, self.grad_clip, self.members)


def shipped_cases(configs: Path) -> list[Case]:
    """A case per training config in ``configs`` that syncs deltas or borrows a site, at its own settings."""
    cases = []
    for path in sorted(configs.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, dict):
            continue
        sync = raw.get("sync") or {}
        if not (isinstance(sync, dict) and sync.get("method") == "delta") and raw.get("harvest") is None:
            continue
        cfg = load_train_config(path, [])
        site = (cfg.harvest.replicas, cfg.harvest.fanout) if cfg.harvest is not None else DEFAULT_SITE
        cases.append(
            Case(
                name=f"{configs.name}/{path.name}",
                model=cfg.model.preset if cfg.model.path is None else STAND_IN,
                lr=cfg.train.lr,
                sync=cfg.sync,
                weight_decay=cfg.train.weight_decay,
                betas=cfg.train.betas,
                grad_clip=cfg.train.grad_clip,
                members=site[0],
                fanout=site[1],
                max_position_embeddings=cfg.model.max_position_embeddings or 1024,
            )
        )
    return cases


def all_cases(configs: Path, quick: bool) -> list[Case]:
    """The shipped configs' cases, the fine-tuning lr on the stand-in and on ``tiny``; duplicates merged by name."""
    bf16 = SyncConfig(method="delta", dtype="bfloat16")
    cases = [
        *shipped_cases(configs),
        Case("fine-tuning lr", STAND_IN, FINE_TUNING_LR, bf16),
        Case(
            "fine-tuning lr, tiny (reference)",
            "tiny",
            FINE_TUNING_LR,
            bf16,
            max_position_embeddings=256,
            reference=True,
        ),
    ]
    if quick:
        cases = [replace(c, model=QUICK_STAND_IN) if c.model == STAND_IN else c for c in cases]
    merged: dict[tuple[Any, ...], Case] = {}
    for case in cases:
        first = merged.get(case.key())
        if first is None:
            merged[case.key()] = case
        else:
            merged[case.key()] = replace(
                first, name=f"{first.name} + {case.name}", reference=first.reference and case.reference
            )
    return list(merged.values())


def build(case: Case, seed: int = 0) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """The fp32 model of ``case`` and a function giving each step's batch of token ids."""
    gen = torch.Generator().manual_seed(seed)
    if case.model in QWEN2_SHAPES:
        from transformers import Qwen2Config, Qwen2ForCausalLM  # deferred: transformers is heavy

        shape: dict[str, Any] = dict(zip(QWEN2_FIELDS, QWEN2_SHAPES[case.model], strict=True))
        config = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=1024)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(config).float()
        rows, length = QWEN2_BATCH
        vocab = config.vocab_size
        return model, lambda: torch.randint(0, vocab, (rows, length), generator=gen)
    from rollarc.bench.weightsync import arithmetic_text  # deferred: a cycle (weightsync runs these cases)
    from rollarc.models import new_policy  # deferred: transformers is heavy

    policy, tokenizer = new_policy(case.model, case.max_position_embeddings, seed=seed)
    ids = torch.tensor(tokenizer(arithmetic_text(4000, seed), verbose=False)["input_ids"])
    rows, length = TEXT_BATCH

    def text() -> torch.Tensor:
        starts = torch.randint(0, len(ids) - length - 1, (rows,), generator=gen)
        return torch.stack([ids[s : s + length] for s in starts])

    return policy, text


def adamw_steps(case: Case, seed: int = 0) -> Iterator[tuple[torch.nn.Module, float]]:
    """Yields the model after each AdamW step at ``case``'s settings, with the step's loss (forever)."""
    model, batch = build(case, seed)
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=case.lr, betas=case.betas, weight_decay=case.weight_decay)
    while True:
        ids = batch()
        loss = model(input_ids=ids, labels=ids).loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), case.grad_clip)
        optimiser.step()
        yield model, float(loss.detach())


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the trainer publishes (``PolicyTrainer.named_weights``): the state dict, tied tensors under each name."""
    return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def measure(case: Case, warmup: int, steps: int, progress: bool = True) -> dict[str, Any]:
    """``warmup`` AdamW steps, then ``steps`` more, each version relayed into the site; bytes per step (medians)."""
    if warmup < 1 or steps < 1:
        raise ValueError(f"a case needs at least one warm-up and one measured step, got {warmup} and {steps}")
    stepper = adamw_steps(case)
    for _ in range(warmup):
        model, _ = next(stepper)
    publisher = WeightPublisher(case.sync)
    publisher.publish(weights(model))
    site = InProcessSite(publisher, case.members, case.fanout)
    dtype_copy = sum(t.numel() * t.element_size() for t in publisher.shard(WHOLE).values())
    cross, inside, whole, changed = [], [], [], []
    bit_exact = True
    for step in range(steps):
        model, loss = next(stepper)
        publisher.publish(weights(model))
        totals = site.push()
        bit_exact &= not site.mismatched()
        update = publisher.latest(WHOLE)
        cross.append(totals["cross_site_bytes"])
        inside.append(totals["in_site_bytes"])
        whole.append(updates_nbytes(update))
        buckets = [b for u in update for b in u.buckets]
        changed.append(sum(b.changed for b in buckets) / max(1, sum(b.elements for b in buckets)))
        if progress:
            print(
                f"  {case.model} lr {case.lr:g}: step {step + 1}/{steps}, loss {loss:.3f}, cross-site "
                f"{totals['cross_site_bytes'] / 1e6:.3f} MB, changed {changed[-1]:.3%}, bitwise equal {bit_exact}",
                flush=True,
            )
    params, fp32_copy = count_params(model), site.full_copy_bytes  # one fp32 copy, as HarvestPool reports it
    del stepper, model, site, publisher
    gc.collect()
    per_step = float(statistics.median(cross))
    return {
        "name": case.name,
        "model": case.model,
        "params": params,
        "lr": case.lr,
        "dtype": case.sync.dtype or "float32",
        "site_members": case.members,
        "fanout": case.fanout,
        "warmup_steps": warmup,
        "steps": steps,
        "reference": case.reference,
        "changed_fraction": float(statistics.median(changed)),
        "fp32_copy_bytes": fp32_copy,
        "dtype_copy_bytes": dtype_copy,
        "whole_update_bytes_per_step": float(statistics.median(whole)),
        "cross_site_bytes_per_step": per_step,
        "in_site_bytes_per_step": float(statistics.median(inside)),
        "cross_site_over_fp32_copy": per_step / fp32_copy,
        "fp32_copy_over_cross_site": fp32_copy / per_step,
        "dtype_copy_over_cross_site": dtype_copy / per_step,
        "bit_exact": bit_exact,
    }
