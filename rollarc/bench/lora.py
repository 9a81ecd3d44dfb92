"""LoRA vs full fine-tuning on the RLVR demo's policy: bytes per weight sync and time per training step.

``rollarc bench lora`` builds the policy of ``configs/rlvr_lora.yaml`` (the tiny preset), a GRPO batch shaped
like that demo's steps (``groups_per_step`` groups of ``group_size`` replies to its training prompts, rendered
with the chat template) and trains it in process, no Ray, with the same ``PolicyTrainer`` as ``rollarc train``:
once with every weight trainable (the baseline, ``model.lora: null``) and once with the config's adapters. For
each it reports what one sync sends (``WeightPublisher`` with the config's ``sync`` settings: the weights, or the
adapter only) and the median wall time of a training step. It also checks that a replica merging the synced
adapter (``rollarc.sync.lora``) holds exactly peft's ``merge_and_unload`` weights.

The step times are this machine's and include the KL reference pass (full: a frozen copy; LoRA: the same model
with its adapters disabled). Bytes do not depend on the machine.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.bench.harness import bench_parser, finish
from rollarc.bench.report_file import REPO_ROOT, markdown_table
from rollarc.config import Config, load_train_config
from rollarc.models import new_policy
from rollarc.sync.lora import AdapterMerge
from rollarc.sync.versions import WHOLE, WeightPublisher
from rollarc.train.lora import adapter_state, apply_lora, merged_weights
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.trainer_options import trainer_options

CONFIG = REPO_ROOT / "configs" / "rlvr_lora.yaml"


def demo_groups(cfg: Config, renderer: ChatRenderer, groups: int, size: int, seed: int) -> list[list[Trajectory]]:
    """``groups`` GRPO groups of ``size`` random replies (``agent.max_tokens_per_turn`` tokens) to the demo's prompts."""
    task = cfg.tasks[0]
    assert task.dataset is not None, "the LoRA bench runs on a dataset task (configs/rlvr_lora.yaml)"
    train = task.dataset.files["train"]
    assert isinstance(train, str), "the LoRA bench reads configs/rlvr_lora.yaml's one training file"
    rows = [json.loads(line) for line in (REPO_ROOT / train).read_text().splitlines()]
    g = torch.Generator().manual_seed(seed)
    vocab = len(renderer.tokenizer)
    reply_tokens = task.agent.max_tokens_per_turn
    out = []
    for i in range(groups):
        prompt = renderer.prompt_ids([Message("user", rows[i % len(rows)]["prompt"])])
        group = []
        for j in range(size):
            seg = Segment()
            seg.extend_context(prompt)
            reply = torch.randint(4, vocab, (reply_tokens,), generator=g).tolist()
            seg.extend_generated(reply, [-3.0] * reply_tokens, [0] * reply_tokens)
            group.append(Trajectory(traj_id=f"g{i}-{j}", task=task.name, seed=i, segments=[seg], reward=float(j % 2)))
        out.append(group)
    return out


class Mode:
    """One side of the comparison: a trainer (full, or with the config's adapters) and its weight publisher."""

    def __init__(self, cfg: Config, lora: bool) -> None:
        torch.manual_seed(cfg.seed)
        model, tokenizer = new_policy(cfg.model.preset, cfg.model.max_position_embeddings, seed=cfg.model.init_seed)
        if lora:
            assert cfg.model.lora is not None
            model = apply_lora(model, cfg.model.lora, cfg.seed)  # type: ignore[assignment]  # a PeftModel wraps it
        self.cfg, self.lora, self.model = cfg, lora, model
        self.trainer = PolicyTrainer(
            model, cfg.algo, cfg.train.lr, **trainer_options(cfg, tokenizer.pad_token_id), adapter=lora
        )
        self.publisher = WeightPublisher(cfg.sync)
        self.publisher.publish(self.trainer.named_weights(), version=0)
        self.step_s: list[float] = []
        self.sync_bytes: list[int] = []

    def step(self, groups: list[list[Trajectory]], record: bool) -> None:
        """One training step and its publish; ``record``: keep its time and bytes (not the warm-up's)."""
        start = time.perf_counter()
        self.trainer.train_step(groups)
        elapsed = time.perf_counter() - start
        self.publisher.publish(self.trainer.named_weights(), version=self.trainer.version)
        if record:
            self.step_s.append(elapsed)
            self.sync_bytes.append(sum(u.nbytes for u in self.publisher.latest(WHOLE)))

    def result(self) -> dict[str, Any]:
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        out: dict[str, Any] = {
            "step_s": statistics.median(self.step_s),
            "sync_bytes": int(statistics.median(self.sync_bytes)),
            "trainable_params": trainable,
            "params": sum(p.numel() for p in self.model.parameters()),
        }
        if self.lora:
            lora = self.cfg.model.lora
            assert lora is not None
            base, _ = new_policy(
                self.cfg.model.preset, self.cfg.model.max_position_embeddings, self.cfg.model.init_seed
            )
            replica = AdapterMerge(base.state_dict(), lora.scaling).merged(adapter_state(self.model))  # type: ignore[arg-type]
            expected = merged_weights(self.model)  # type: ignore[arg-type]
            out["bit_exact"] = all(torch.equal(t, expected[n]) for n, t in replica.items())
            out["params"] -= trainable  # the base's parameters, as the full run counts them
        return out


def measure(cfg: Config, groups: list[list[Trajectory]], steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Full and LoRA results after one warm-up and ``steps`` measured steps each.

    The two trainers take turns step by step, so a machine whose load changes during the run slows both alike.
    """
    full, lora = Mode(cfg, False), Mode(cfg, True)
    for step in range(steps + 1):
        for mode in (full, lora):
            mode.step(groups, record=step > 0)
    return full.result(), lora.result()


def docs_body(result: dict[str, Any]) -> str:
    rows = [
        ["full fine-tuning", result["full_trainable_params"], result["full_sync_bytes"], result["full_step_s"]],
        ["LoRA", result["lora_trainable_params"], result["lora_sync_bytes"], result["lora_step_s"]],
    ]
    table = markdown_table(["", "trainable params", "bytes per sync", "train step s (median)"], rows)
    return (
        f"`configs/rlvr_lora.yaml`'s policy ({result['params']:,} parameters) and a batch shaped like its steps "
        f"({result['groups']} groups x {result['group_size']}), trained in process, {result['steps']} measured steps "
        f"each (the two trainers take turns); sync with `sync.method: {result['sync_method']}`.\n\n{table}\n\n"
        f"LoRA (r={result['lora_r']}, {result['lora_targets']}) sends {result['bytes_ratio']:.1f}x fewer bytes per "
        f"sync; its train step takes {result['step_time_ratio']:.2f}x the full one's time. A replica merging the "
        f"synced adapter holds peft's merged weights bit for bit: {'yes' if result['bit_exact'] else 'NO'}."
    )


def main(argv: list[str]) -> int:
    parser = bench_parser(
        "bench lora",
        __doc__,
        quick="2 groups of 2 and 1 measured step, for smoke tests",
        config=str(CONFIG),
        config_help="an RLVR config with model.lora (default: rlvr_lora)",
    )
    parser.add_argument("--steps", type=int, default=5, help="measured training steps per mode")
    args = parser.parse_args(argv)
    cfg = load_train_config(Path(args.config))
    if cfg.model.lora is None:
        raise SystemExit(f"{args.config}: model.lora is not set; the bench compares it with full fine-tuning")
    torch.set_num_threads(cfg.cluster.roles.train.threads)
    groups_n, size = (2, 2) if args.quick else (cfg.train.groups_per_step, cfg.train.group_size)
    steps = 1 if args.quick else args.steps
    _, tokenizer = new_policy(cfg.model.preset, cfg.model.max_position_embeddings)
    groups = demo_groups(cfg, ChatRenderer(tokenizer), groups_n, size, cfg.seed)
    full, lora = measure(cfg, groups, steps)
    print(f"full: {full['sync_bytes'] / 1e6:.2f} MB per sync, {full['step_s']:.3f} s per step", flush=True)
    print(f"lora: {lora['sync_bytes'] / 1e6:.3f} MB per sync, {lora['step_s']:.3f} s per step", flush=True)
    result = {
        "bytes_ratio": full["sync_bytes"] / lora["sync_bytes"],
        "step_time_ratio": lora["step_s"] / full["step_s"],
        "full_sync_bytes": full["sync_bytes"],
        "lora_sync_bytes": lora["sync_bytes"],
        "full_step_s": full["step_s"],
        "lora_step_s": lora["step_s"],
        "full_trainable_params": full["trainable_params"],
        "lora_trainable_params": lora["trainable_params"],
        "params": full["params"],
        "bit_exact": lora["bit_exact"],
        "lora_r": cfg.model.lora.r,
        "lora_targets": ",".join(cfg.model.lora.target_modules),
        "sync_method": cfg.sync.method,
        "groups": groups_n,
        "group_size": size,
        "steps": steps,
    }
    return finish("lora", docs_body(result), result, "rollarc bench lora", args)
