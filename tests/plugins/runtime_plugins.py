"""Scripted text envs for the agent-loop and runtime tests (loaded by entry point from tests/plugins)."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium
from gymnasium.spaces import Text


class ScriptedEnv(gymnasium.Env[str, str]):
    """Episode of ``turns`` steps. Reward 1 per step whose action is "U" (success: every action was "U").

    ``raise_on_seed_mod``/``hang_on_seed_mod``: seeds divisible by it raise / hang in ``step``; ``exit_on_seed``:
    ``step`` on that seed ends the whole process (``os._exit``), as a plugin that crashes its worker does;
    ``nan_reward``: the first step returns a NaN reward; ``reward_by_length``: reward len(action) / 10
    instead (so even a random policy sees reward differences within a group).
    """

    def __init__(
        self,
        turns: int = 3,
        raise_on_seed_mod: int = 0,
        hang_on_seed_mod: int = 0,
        hang_s: float = 5.0,
        nan_reward: bool = False,
        obs_len: int = 4,
        reward_by_length: bool = False,
        exit_on_seed: int | None = None,
    ) -> None:
        self.exit_on_seed = exit_on_seed
        self.reward_by_length = reward_by_length
        self.turns = turns
        self.raise_on_seed_mod = raise_on_seed_mod
        self.hang_on_seed_mod = hang_on_seed_mod
        self.hang_s = hang_s
        self.nan_reward = nan_reward
        self.obs_len = obs_len
        self.observation_space = Text(max_length=64)
        self.action_space = Text(max_length=64)
        self.seed_value = 0
        self.t = 0
        self.all_up = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.seed_value = seed or 0
        self.t = 0
        self.all_up = True
        return self._obs(), {}

    def _obs(self) -> str:
        return f"t{self.t}".ljust(self.obs_len, ".")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.exit_on_seed is not None and self.seed_value == self.exit_on_seed:
            os._exit(3)  # the EnvWorker's process dies with it
        if self.raise_on_seed_mod and self.seed_value % self.raise_on_seed_mod == 0:
            raise RuntimeError(f"scripted env crash on seed {self.seed_value}")
        if self.hang_on_seed_mod and self.seed_value % self.hang_on_seed_mod == 0:
            time.sleep(self.hang_s)
        self.t += 1
        up = action.strip() == "U"
        self.all_up &= up
        reward = len(action) / 10 if self.reward_by_length else float(up)
        if self.nan_reward and self.t == 1:
            reward = float("nan")
        done = self.t >= self.turns
        info: dict[str, Any] = {"invalid_action": not up}
        if done:
            info["success"] = self.all_up
        return self._obs(), reward, done, False, info

    def expert_action(self) -> str:
        return "U"
