"""Envs loaded by import path in the registry tests (``text_plugins:EchoEnv`` with tests/plugins on sys.path)."""

from __future__ import annotations

from typing import Any

import gymnasium
from gymnasium.spaces import Discrete, Text


class EchoEnv(gymnasium.Env[str, str]):
    """Plain gymnasium text env without the optional extras: reward 1 when the reply repeats the prompt."""

    def __init__(self, word: str = "hello") -> None:
        self.word = word
        self.observation_space = Text(max_length=32)
        self.action_space = Text(max_length=32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return self.word, {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        success = action == self.word
        return self.word, float(success), True, False, {"success": success, "invalid_action": False}


def make_echo(word: str = "factory") -> EchoEnv:
    """A factory entry point (not a class)."""
    return EchoEnv(word=word)


class DiscreteEnv(gymnasium.Env[int, int]):
    """Not a text env: integer spaces."""

    def __init__(self) -> None:
        self.observation_space = Discrete(4)
        self.action_space = Discrete(2)


class NotAnEnv:
    """A class that is not a gymnasium.Env."""


def make_not_an_env() -> str:
    return "not an env"


NOT_CALLABLE = 42
