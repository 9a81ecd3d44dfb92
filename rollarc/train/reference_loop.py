"""The RL step, end to end, in one process with no Ray: the spec and test oracle of the runtime.

Each step plays ``B`` groups of ``G`` trajectories with rollarc's engine and agent loop, trains one
``PolicyTrainer.train_step`` on them and puts the new weights into the engine: synchronous mode (``k = 0``
with the barrier), without any of the distribution. It plays the very trajectories the controller would:
group ``i`` runs task ``TaskMix.next()``, env seed ``train.seed_base + i`` and sampling seed
``group_sampling_seed(seed, i) + j`` for its trajectory ``j`` (``traj_id`` ``g{i}-{j}``); a group with
fewer than two good trajectories is dropped and the next index takes its place; the batch is ordered by
group index. The trainer and the engine are built as the TrainWorker and a RolloutWorker build them, with
the same thread counts, and new weights reach the engine through the sync wire dtype.

What is exact against the Ray runtime in synchronous mode: the batches' token ids, rewards and versions.
What is not, in general: the behaviour log-probs the engine records, which depend in the last bits on
which requests it batched together (timing), and through the importance ratio the weights, to float
rounding (see tests/integration/test_reference_loop.py for the tolerance). With ``async.redundancy > 0``
this loop plays all ``G + r`` rollouts and keeps the ones the runtime keeps under ``redundancy_keep:
by_index`` (the first ``G`` by index that finished well, :mod:`rollarc.policy.redundancy`): the same set
whenever the same rollouts fail, which holds for env errors and the seeded injected failures, not for
trajectory timeouts (timing). ``first_finished`` depends on timing, so it is rejected here. Model-based
rewards (``reward.kind`` other than ``rule``) are not supported here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.local_eval import heldout_specs
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.seeds import group_sampling_seed
from rollarc.agent.trajectory import Trajectory, batch_digest
from rollarc.config import Config
from rollarc.config.io import ConfigError
from rollarc.engine.async_engine import AsyncLLMEngine
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.models.device import resolve_device, resolve_dtype
from rollarc.policy.redundancy import kept_rollouts
from rollarc.policy.task_mix import TaskMix
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.trainer_options import trainer_options


@dataclass
class ReferenceResult:
    steps: list[dict[str, Any]]  # one record per step, with the keys the controller writes to metrics.jsonl
    evals: list[dict[str, Any]] = field(default_factory=list)
    model: PreTrainedModel | None = None  # the trained policy (the trainer's float32 master weights)


def run_reference(
    cfg: Config, policy_dir: str | Path | None = None, on_record: Callable[[dict[str, Any]], None] | None = None
) -> ReferenceResult:
    """Train ``cfg.train.steps`` synchronous steps from ``policy_dir`` (default ``model.path``).

    ``on_record`` (optional) sees every step record and every evaluation as it is made, so a long run's
    curve can be followed (``scripts/reference_curve.py``)."""
    path = policy_dir if policy_dir is not None else cfg.model.path
    if path is None:
        raise ConfigError("the reference loop needs a starting policy: set model.path (or pass policy_dir)")
    if cfg.reward.kind != "rule":
        raise ConfigError(f"reward.kind={cfg.reward.kind!r}: the reference loop supports rule rewards only")
    if cfg.async_.redundancy_keep != "by_index":
        raise ConfigError(
            f"async.redundancy_keep={cfg.async_.redundancy_keep!r}: the reference loop has no finishing order; "
            "set async.redundancy_keep: by_index"
        )
    return asyncio.run(_Loop(cfg, str(path), on_record).run())


class _Loop:
    def __init__(self, cfg: Config, policy_dir: str, on_record: Callable[[dict[str, Any]], None] | None = None):
        self.on_record = on_record
        roles = cfg.cluster.roles
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        model, tokenizer = load_policy(policy_dir)
        self.trainer = PolicyTrainer(model, cfg.algo, cfg.train.lr, **trainer_options(cfg, tokenizer.pad_token_id))
        rollout_threads = roles.rollout[0].threads
        engine_model, _ = load_policy(policy_dir)
        device, dtype = resolve_device(cfg.model.device), resolve_dtype(cfg.engine.dtype or cfg.model.dtype)
        torch.nn.Module.to(engine_model, device, dtype)  # in place; transformers' typed .to rejects a device
        self.engine_dtypes = {name: tensor.dtype for name, tensor in engine_model.state_dict().items()}
        self.engine = AsyncLLMEngine(engine_model, cfg.engine.model_copy(update={"num_threads": rollout_threads}))
        # The engine applies its count on its own thread (and here at construction); training runs here.
        torch.set_num_threads(roles.train.threads)
        self.renderer = ChatRenderer(tokenizer)
        self.mix = TaskMix({task.name: task.weight for task in cfg.tasks})
        self.group_index = 0

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        return await self.engine.generate(prompt_ids, params, cache_key=cache_key)

    async def run(self) -> ReferenceResult:
        cfg = self.cfg
        runner = EpisodeRunner(
            {t.name: t for t in cfg.tasks}, self.renderer, self._generate, cfg.sampling, latency_seed=cfg.seed
        )
        result = ReferenceResult(steps=[])
        start = time.perf_counter()
        try:
            result.evals.append(await self._evaluate(runner, 0, start))
            for version in range(cfg.train.steps):
                t0 = time.perf_counter()
                batch = await self._play_batch(runner)
                trajs = [t for group in batch for t in group]
                played = time.perf_counter()
                stats = self.trainer.train_step(batch)
                await self.engine.update_weights(self._wire_weights(), self.trainer.version)
                record = {
                    "version": version + 1,
                    "wall_s": time.perf_counter() - start,
                    "step_time_s": time.perf_counter() - t0,
                    "rollout_s": played - t0,
                    "train_sync_s": time.perf_counter() - played,
                    "batch_digest": batch_digest(trajs),
                    "trajectories": len(trajs),
                    "reward": float(np.mean([t.reward for t in trajs])),
                    "success": float(np.mean([t.success for t in trajs])),
                    "turns": float(np.mean([t.num_turns for t in trajs])),
                    "generated_tokens": int(sum(t.generated_tokens for t in trajs)),
                    "prompt_tokens": int(sum(t.prompt_tokens for t in trajs)),
                    "rewards": [t.reward for t in trajs],
                    **{k: v for k, v in stats.items() if k not in ("version", "rss_mb")},
                }
                every = cfg.train.eval_every
                if every and (version + 1) % every == 0 and version + 1 < cfg.train.steps:
                    result.evals.append(await self._evaluate(runner, version + 1, start))
                    record["heldout_success"] = result.evals[-1]["success"]
                result.steps.append(record)
                if self.on_record is not None:
                    self.on_record(record)
            if cfg.train.steps:
                result.evals.append(await self._evaluate(runner, cfg.train.steps, start))
        finally:
            runner.close()
            self.engine.shutdown()
        result.model = self.trainer.model
        return result

    async def _play_batch(self, runner: EpisodeRunner) -> list[list[Trajectory]]:
        """``B`` groups of ``G`` good trajectories; a failed group is replaced by the next index, as the runtime does."""
        B = self.cfg.train.groups_per_step
        kept: dict[int, list[Trajectory]] = {}
        pending = B
        while pending:
            indices = [self._next_group() for _ in range(pending)]
            groups = await asyncio.gather(*[self._play_group(runner, index, task) for index, task in indices])
            for (index, _), group in zip(indices, groups, strict=True):
                if len(group) >= 2:
                    kept[index] = group
            pending = B - len(kept)
        return [kept[index] for index in sorted(kept)]

    def _next_group(self) -> tuple[int, str]:
        index = self.group_index
        self.group_index += 1
        return index, self.mix.next()

    async def _play_group(self, runner: EpisodeRunner, index: int, task: str) -> list[Trajectory]:
        """All ``G + r`` rollouts of group ``index``; the kept ones, as the runtime keeps them under ``by_index``."""
        cfg = self.cfg
        sampling_seed = group_sampling_seed(cfg.seed, index)
        specs = [
            EpisodeSpec(
                traj_id=f"g{index}-{j}",
                task=task,
                seed=cfg.train.seed_base + index,
                group_id=f"g{index}",
                sampling_seed=sampling_seed + j,
            )
            for j in range(cfg.train.group_size + cfg.async_.redundancy)
        ]
        trajs = await asyncio.gather(*[runner.run(spec) for spec in specs])
        kept = kept_rollouts(["ok" if t.status == "ok" else "failed" for t in trajs], cfg.train.group_size)
        assert kept is not None  # every rollout has finished, so the kept set is decided
        return [trajs[i] for i in kept]

    def _wire_weights(self) -> dict[str, torch.Tensor]:
        """The trainer's weights as a rollout engine receives them: through the sync dtype, then the engine's."""
        wire = getattr(torch, self.cfg.sync.dtype) if self.cfg.sync.dtype else None
        out = {}
        for name, tensor in self.trainer.named_weights().items():
            if wire is not None and tensor.is_floating_point():
                tensor = tensor.to(wire)
            out[name] = tensor.to(self.engine_dtypes[name])
        return out

    async def _evaluate(self, runner: EpisodeRunner, version: int, start: float) -> dict[str, Any]:
        n = self.cfg.train.eval_episodes
        if n == 0:
            return {"version": version, "success": float("nan"), "episodes": 0, "wall_s": time.perf_counter() - start}
        specs = heldout_specs(list(self.cfg.tasks), n, self.cfg.train.eval_seed_base, prefix=f"eval-{version}")
        trajs = await asyncio.gather(*[runner.run(spec) for spec in specs])
        result = {
            "version": version,
            "success": float(np.mean([t.success for t in trajs])),
            "episodes": len(trajs),
            "wall_s": time.perf_counter() - start,
        }
        if self.on_record is not None:
            self.on_record({"eval": True, **result})
        return result
