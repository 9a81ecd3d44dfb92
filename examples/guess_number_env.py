"""A plugin env for rollarc: guess a hidden number, told "higher" or "lower" after each guess.

It is a plain ``gymnasium.Env`` (not a rollarc ``TextEnv``) with ``Text`` observation and action
spaces, which is all rollarc needs. It also offers the two optional extras rollarc looks for:
``instructions`` (the system prompt) and ``expert_action()`` (binary search, for SFT demonstrations).

Use it without changing rollarc, with ``examples/`` on ``PYTHONPATH``::

    PYTHONPATH=examples python -c "
    from rollarc.envs import make_env, EnvSpec
    env = make_env(EnvSpec(entry_point='guess_number_env:GuessNumberEnv', kwargs={'high': 50}))
    print(env.reset(seed=0))"

In a config, the env spec is ``{entry_point: "guess_number_env:GuessNumberEnv", kwargs: {high: 50}}``.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium.spaces import Text

CHARSET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")


class GuessNumberEnv(gymnasium.Env[str, str]):
    """Find the hidden integer in [low, high]; reward 1 on a correct guess, -0.1 for a non-number."""

    instructions = "Guess the hidden number. Reply with a number only."

    def __init__(self, low: int = 1, high: int = 20, max_steps: int = 8) -> None:
        if not low < high:
            raise ValueError(f"GuessNumberEnv needs low < high, got low={low}, high={high}")
        self.low, self.high, self.max_steps = low, high, max_steps
        self.observation_space = Text(max_length=48, min_length=0, charset=CHARSET)
        self.action_space = Text(max_length=16, min_length=0, charset=CHARSET)
        self._secret = low
        self._bounds = (low, high)
        self._turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(self.low, self.high + 1))
        self._bounds = (self.low, self.high)
        self._turn = 0
        return f"guess {self.low}-{self.high}", {"turn": 0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._turn += 1
        text = action.strip()
        info: dict[str, Any] = {"turn": self._turn, "invalid_action": not text.isdigit() or len(text) > 6}
        truncated = self._turn >= self.max_steps
        if info["invalid_action"]:
            observation, reward, terminated = "Invalid action. Reply with a number.", -0.1, False
        else:
            guess = int(text)
            terminated = guess == self._secret
            observation = "correct" if terminated else ("higher" if guess < self._secret else "lower")
            reward = 1.0 if terminated else 0.0
            low, high = self._bounds
            self._bounds = (max(low, guess + 1), high) if guess < self._secret else (low, min(high, guess - 1))
        if terminated or truncated:
            info["success"] = terminated
        return observation, reward, terminated, truncated and not terminated, info

    def expert_action(self) -> str | None:
        """Binary search: the middle of what is still possible."""
        low, high = self._bounds
        return str((low + high) // 2)
