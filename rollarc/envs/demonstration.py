"""Play one episode with the env's expert: the raw material of SFT demonstrations.

Works for any text env that offers ``expert_action`` (see :mod:`rollarc.envs.registry`); the episode
records the text the policy would see and say, so SFT data and RL rollouts share one format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium

from rollarc.envs.registry import expert_action


@dataclass
class ExpertEpisode:
    """``observations[i]`` is answered by ``actions[i]`` and earns ``rewards[i]``; the last observation
    is the final one (no action follows it)."""

    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    success: bool = False
    truncated: bool = False
    infos: list[dict[str, Any]] = field(default_factory=list)


def play_expert(env: gymnasium.Env, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ExpertEpisode:
    """Reset ``env`` and follow ``expert_action`` until the episode ends (or the expert has no move)."""
    observation, _ = env.reset(seed=seed, options=options)
    episode = ExpertEpisode(observations=[observation])
    while True:
        action = expert_action(env)
        if action is None:
            return episode
        observation, reward, terminated, truncated, info = env.step(action)
        episode.actions.append(action)
        episode.observations.append(observation)
        episode.rewards.append(float(reward))
        episode.infos.append(info)
        if terminated or truncated:
            episode.success = bool(info.get("success", False))
            episode.truncated = bool(truncated)
            return episode
