"""Envs that hang, for the start-up checks and the no-hang-on-exit tests (loaded by entry point)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium
from gymnasium.spaces import Text

FOREVER_S = 3600.0


class HangOnResetEnv(gymnasium.Env[str, str]):
    """Builds fine, then never returns from ``reset`` (a sandbox that never comes up)."""

    def __init__(self) -> None:
        self.observation_space = Text(max_length=16)
        self.action_space = Text(max_length=16)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        time.sleep(FOREVER_S)
        return "never", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "never", 0.0, True, False, {}
