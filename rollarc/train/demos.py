"""Demonstration dialogues for the SFT warm start, made by the environments' own solvers.

Each demonstration is produced by the real agent loop, with the solver standing in for the policy: at
each turn the "generation" is the expert's next action for the env's current state. The dialogue is
therefore rendered, windowed and masked exactly as RL will later see it, with no second copy of the
chat logic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.loop import EnvFailure, run_trajectory
from rollarc.agent.trajectory import Trajectory
from rollarc.config import SamplingConfig, TaskConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.envs.registry import expert_action, instructions, make_env


class NoExpert(RuntimeError):
    """The environment offers no solver (``expert_action`` returned None at the first turn)."""


def demonstration(task: TaskConfig, seed: int, renderer: ChatRenderer, sampling: SamplingConfig) -> Trajectory:
    """One expert episode of ``task`` on env ``seed`` as a trajectory (behaviour log-probs are 0)."""
    env = make_env(task.env_spec)

    async def expert(prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        action = expert_action(env)
        if action is None:
            raise NoExpert(f"task {task.name!r} has no expert action for seed {seed}")
        ids = renderer.encode_reply(action)[: params.max_tokens]
        return Completion(
            request_id=cache_key,
            prompt_len=len(prompt_ids),
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            token_versions=[0] * len(ids),
            version=0,
            finish_reason="stop",
        )

    async def env_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, RuntimeError) as err:
            raise EnvFailure(str(err)) from err

    traj = Trajectory(traj_id=f"demo-{task.name}-{seed}", task=task.name, seed=seed)
    return asyncio.run(
        run_trajectory(
            env,
            renderer,
            expert,
            task.agent,
            sampling,
            traj,
            env_call,
            instructions=instructions(env) if task.agent.instructions else "",
        )
    )


def demonstrations(
    tasks: list[TaskConfig], episodes: int, seed_base: int, renderer: ChatRenderer, sampling: SamplingConfig
) -> list[Trajectory]:
    """``episodes`` successful expert trajectories, spread over the tasks by their weights."""
    total_weight = sum(t.weight for t in tasks)
    result: list[Trajectory] = []
    seed = seed_base
    for index, task in enumerate(tasks):
        share = round(episodes * task.weight / total_weight) if index < len(tasks) - 1 else episodes - len(result)
        kept = 0
        while kept < share:
            traj = demonstration(task, seed, renderer, sampling)
            seed += 1
            if traj.status == "ok" and traj.success:
                result.append(traj)
                kept += 1
            if seed - seed_base > 20 * episodes + 100:
                raise NoExpert(f"task {task.name!r}: the solver rarely succeeds; {kept}/{share} demonstrations")
    return result
