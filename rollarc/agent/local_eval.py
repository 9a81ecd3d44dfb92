"""Evaluate a policy in this process: one engine, one event loop, the same agent loop as the runtime.

Used where starting Ray would cost more than the work (the SFT report, ``rollarc eval``, tests). The
Ray runtime evaluates through its EnvWorkers with exactly the same ``EpisodeRunner``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.trajectory import Trajectory
from rollarc.engine.async_engine import AsyncLLMEngine
from rollarc.engine.config import EngineConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.policy.task_mix import TaskMix

if TYPE_CHECKING:
    from rollarc.config import SamplingConfig, TaskConfig  # type only: the training config is above agent/


def heldout_specs(
    tasks: list[TaskConfig], episodes: int, seed_base: int, prefix: str = "eval", temperature: float = 0.0
) -> list[EpisodeSpec]:
    """Held-out episodes: tasks by weight (smooth round-robin), env seeds ``seed_base + i``.

    ``temperature`` 0 is greedy; above 0 episode i samples with seed ``seed_base + i``, so every evaluation
    of a run (before, during and after RL) draws the same noise and their difference is the policy's.
    """
    mix = TaskMix({t.name: t.weight for t in tasks})
    sampled = temperature > 0
    return [
        EpisodeSpec(
            traj_id=f"{prefix}-{i}",
            task=mix.next(),
            seed=seed_base + i,
            greedy=not sampled,
            temperature=temperature if sampled else None,
            sampling_seed=seed_base + i if sampled else None,
            heldout=True,
        )
        for i in range(episodes)
    ]


async def run_local(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: list[TaskConfig],
    specs: list[EpisodeSpec],
    sampling: SamplingConfig,
    engine_cfg: EngineConfig | None = None,
) -> list[Trajectory]:
    engine = AsyncLLMEngine(model, engine_cfg or EngineConfig())
    try:

        async def generate(prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
            return await engine.generate(prompt_ids, params, cache_key=cache_key)

        runner = EpisodeRunner({t.name: t for t in tasks}, ChatRenderer(tokenizer), generate, sampling)
        try:
            return list(await asyncio.gather(*[runner.run(spec) for spec in specs]))
        finally:
            runner.close()
    finally:
        engine.shutdown()


def success_rate(trajectories: list[Trajectory]) -> dict[str, Any]:
    per_task: dict[str, list[bool]] = {}
    for traj in trajectories:
        per_task.setdefault(traj.task, []).append(traj.success)
    return {
        "success": float(np.mean([t.success for t in trajectories])) if trajectories else float("nan"),
        "episodes": len(trajectories),
        "failed": sum(t.status != "ok" for t in trajectories),
        "per_task": {name: float(np.mean(v)) for name, v in per_task.items()},
    }


def evaluate_local(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: list[TaskConfig],
    episodes: int,
    seed_base: int,
    sampling: SamplingConfig,
    engine_cfg: EngineConfig | None = None,
    temperature: float = 0.0,
) -> dict[str, Any]:
    specs = heldout_specs(tasks, episodes, seed_base, temperature=temperature)
    return success_rate(asyncio.run(run_local(model, tokenizer, tasks, specs, sampling, engine_cfg)))
