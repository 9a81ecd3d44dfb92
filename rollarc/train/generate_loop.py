"""A plain in-process GRPO loop on HF ``generate``: the baseline ``rollarc bench step`` measures rollarc against.

It is what a TRL-style trainer does on single-turn work, in one process with no Ray and no rollarc
engine: render each group's prompt once, sample all ``B×G`` completions in one left-padded
``model.generate`` call on the policy being trained, score them with the environment, and take one
``PolicyTrainer.train_step`` (the same loss from ``algo/`` and the same AdamW as the TrainWorker). There
is no weight sync: the sampler *is* the trained model.

Behaviour log-probs come from ``generate``'s processed scores (``softmax(logits / T)`` after top-k/top-p,
renormalised), the distribution the token was drawn from, which is the definition the engine uses too
(docs/engine.md). Group ``i`` plays env seed ``train.seed_base + i`` of task ``TaskMix.next()``, as the
runtime does. Single-turn tasks only (``agent.max_turns: 1``): multi-turn work is what the engine and the
agent loop are for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.config import Config
from rollarc.config.io import ConfigError
from rollarc.data.config import PLAIN_PROMPT
from rollarc.envs.registry import instructions as env_instructions
from rollarc.envs.registry import make_env
from rollarc.models.checkpoint import load_policy
from rollarc.policy.task_mix import TaskMix
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.trainer_options import trainer_options

PHASES = ("prompts_s", "generate_s", "env_s", "batch_s", "train_s")


@dataclass
class GenerateLoopResult:
    steps: list[dict[str, Any]]  # one record per step: reward, success and the seconds of each phase
    wall_s: float  # all steps, end to end
    model: PreTrainedModel | None = None
    completions: int = 0
    phase_s: dict[str, float] = field(default_factory=dict)  # median seconds per step of each phase


def run_generate_loop(
    cfg: Config, policy_dir: str, threads: int = 1, log: Callable[[str], None] | None = None
) -> GenerateLoopResult:
    """Train ``cfg.train.steps`` GRPO steps from ``policy_dir`` with HF ``generate`` on ``threads`` torch threads."""
    bad = [t.name for t in cfg.tasks if t.agent.max_turns != 1]
    if bad:
        raise ConfigError(f"tasks {bad}: the generate loop plays single-turn tasks only; set tasks.N.agent.max_turns=1")
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_policy(policy_dir)
    t = cfg.train
    trainer = PolicyTrainer(model, cfg.algo, cfg.train.lr, **trainer_options(cfg, tokenizer.pad_token_id))
    loop = _Loop(cfg, trainer, ChatRenderer(tokenizer))
    steps = []
    start = time.perf_counter()
    for step in range(t.steps):
        steps.append(loop.step(step))
        if log is not None:
            log(f"  step {step + 1}: reward {steps[-1]['reward']:.3f}, {steps[-1]['step_time_s']:.2f} s")
    wall_s = time.perf_counter() - start
    return GenerateLoopResult(
        steps=steps,
        wall_s=wall_s,
        model=trainer.model,
        completions=sum(s["trajectories"] for s in steps),
        phase_s={p: float(np.median([s[p] for s in steps])) for p in PHASES} if steps else {},
    )


class _Loop:
    def __init__(self, cfg: Config, trainer: PolicyTrainer, renderer: ChatRenderer):
        self.cfg = cfg
        self.trainer = trainer
        self.renderer = renderer
        self.tasks = {task.name: task for task in cfg.tasks}
        self.mix = TaskMix({task.name: task.weight for task in cfg.tasks})
        self.envs: dict[str, list[Any]] = {name: [] for name in self.tasks}
        self.group_index = 0

    def step(self, step: int) -> dict[str, Any]:
        cfg = self.cfg
        B, G = cfg.train.groups_per_step, cfg.train.group_size
        t0 = time.perf_counter()
        groups = []  # (index, task, env seed, prompt ids): the prompt is rendered once per group
        for _ in range(B):
            index, task = self.group_index, self.mix.next()
            self.group_index += 1
            seed = cfg.train.seed_base + index
            env = self._env(task)
            observation, reset_info = env.reset(seed=seed)
            messages = [Message("user", observation)]
            if self.tasks[task].agent.instructions and env_instructions(env):
                messages.insert(0, Message("system", env_instructions(env)))
            plain = bool(reset_info.get(PLAIN_PROMPT, False))  # a dataset's plain-text prompt: untemplated, as in RL
            groups.append((index, task, seed, self.renderer.prompt_ids(messages, plain=plain)))
        t1 = time.perf_counter()
        rows = [(g, j) for g in range(B) for j in range(G)]
        tokens, logprobs = self._generate(
            [groups[g][3] for g, _ in rows], max(self.tasks[t].agent.max_tokens_per_turn for _, t, _, _ in groups)
        )
        t2 = time.perf_counter()
        outcomes = []
        for (g, _), ids in zip(rows, tokens, strict=True):
            _index, task, seed, _prompt = groups[g]
            env = self._env(task)
            env.reset(seed=seed)
            outcomes.append(env.step(self.renderer.reply_text(ids)))
        t3 = time.perf_counter()
        batch: list[list[Trajectory]] = [[] for _ in range(B)]
        for (g, j), ids, logps, outcome in zip(rows, tokens, logprobs, outcomes, strict=True):
            index, task, seed, prompt = groups[g]
            _obs, reward, terminated, truncated, info = outcome
            segment = Segment()
            segment.extend_context(list(prompt))
            segment.extend_generated(ids, logps, [self.trainer.version] * len(ids))
            batch[g].append(
                Trajectory(
                    traj_id=f"g{index}-{j}",
                    task=task,
                    seed=seed,
                    group_id=f"g{index}",
                    segments=[segment],
                    turn_rewards=[float(reward)],
                    reward=float(reward),
                    success=bool(info.get("success", False)),
                    num_turns=1,
                    invalid_actions=int(bool(info.get("invalid_action", False))),
                    finish="terminated" if terminated else ("truncated" if truncated else "max_turns"),
                    prompt_tokens=len(prompt),
                    generated_tokens=len(ids),
                )
            )
        t4 = time.perf_counter()
        stats = self.trainer.train_step(batch)
        t5 = time.perf_counter()
        trajs = [traj for group in batch for traj in group]
        return {
            "version": step + 1,
            "step_time_s": t5 - t0,
            "prompts_s": t1 - t0,
            "generate_s": t2 - t1,
            "env_s": t3 - t2,
            "batch_s": t4 - t3,
            "train_s": t5 - t4,
            "trajectories": len(trajs),
            "reward": float(np.mean([traj.reward for traj in trajs])),
            "success": float(np.mean([traj.success for traj in trajs])),
            "generated_tokens": sum(traj.generated_tokens for traj in trajs),
            "loss": stats.get("loss"),
        }

    def _env(self, task: str) -> Any:
        free = self.envs[task]
        if not free:
            free.append(make_env(self.tasks[task].env_spec))
        return free[0]

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        """Sample one completion per prompt in one left-padded ``generate`` call; tokens up to EOS and their log-probs."""
        model, sampling = self.trainer.model, self.cfg.sampling
        pad, eos = self.renderer.tokenizer.pad_token_id, self.renderer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention_mask = (
            torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]
        ).long()
        greedy = sampling.temperature == 0
        model.eval()
        device = next(model.parameters()).device
        out = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_k=sampling.top_k if not greedy else None,
            top_p=sampling.top_p if not greedy else None,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
            output_scores=True,
            return_dict_in_generate=True,
        )
        model.train()
        new = out.sequences[:, width:]
        scores = torch.stack(out.scores, dim=1).float()  # [N, T, V] processed (tempered, filtered) logits
        logp = torch.log_softmax(scores, dim=-1).gather(-1, new[:, :, None])[:, :, 0]
        lengths = _lengths_to_eos(new, eos)
        token_lists = new.tolist()
        logp_lists = logp.tolist()
        return (
            [row[:n] for row, n in zip(token_lists, lengths, strict=True)],
            [row[:n] for row, n in zip(logp_lists, lengths, strict=True)],
        )


def _lengths_to_eos(tokens: torch.Tensor, eos: int) -> list[int]:
    """Per row, the number of tokens up to and including the first ``eos`` (all of them when there is none)."""
    is_eos = tokens == eos
    first = torch.where(
        is_eos.any(dim=1), is_eos.float().argmax(dim=1) + 1, torch.full_like(tokens[:, 0], tokens.shape[1])
    )
    return [int(n) for n in first.tolist()]
