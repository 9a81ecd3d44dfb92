"""`TextEnv`: the gymnasium base class of rollarc's text environments.

Why a base class on top of ``gymnasium.Env``: every text env shares the same contract with the agent
loop, and getting it wrong in one env would corrupt training data silently:

* observations (user messages) and actions (assistant replies) are ``str`` in a ``Text`` space over
  the policy tokenizer's characters (printable ASCII and newline);
* an unparseable action (or one longer than ``max_action_length``) is an *invalid action*: reward
  ``invalid_penalty``, the state is unchanged, the observation says briefly what is allowed; it never
  raises (model output is hostile input);
* ``info`` carries ``turn`` and ``invalid_action`` on every step and ``success`` at episode end;
* ``max_steps`` turns truncate the episode; an episode is fully determined by the reset seed;
* ``expert_action()`` gives the solver's optimal next action from the current state (SFT
  demonstrations, DAgger relabelling) and ``instructions`` a short system prompt.

Subclasses implement the game in a handful of hooks (``_new_episode``, ``_parse``, ``_apply``,
``_render``, ``_expert``) and never touch this bookkeeping. Constructor kwargs are validated by a
pydantic config (``Config`` class attribute), so a bad or unknown kwarg fails with its name.
"""

from __future__ import annotations

import string
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

import gymnasium
import numpy as np
from gymnasium.spaces import Text
from pydantic import Field

from rollarc.config.io import FrozenModel, validate

# Same characters as the policy tokenizer (rollarc.models.tokenizer.CHARACTERS); kept here so that
# env workers do not import transformers. A unit test checks that the two stay equal.
CHARSET: str = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")

ParseMode = Literal["strict", "lenient"]
Parsed = TypeVar("Parsed")


MAX_ACTION_LENGTH = 1 << 16  # bound of max_action_length: replies are model output, a few thousand tokens at most


class GenerationFailed(RuntimeError):
    """No task instance meeting the env's settings was found; the message names the settings to relax."""


class TextEnvConfig(FrozenModel):
    """Keyword arguments every text env accepts."""

    max_steps: int = Field(default=20, ge=1, description="turns before the episode is truncated")
    invalid_penalty: float = Field(default=-0.1, description="reward of an invalid (unparseable/illegal) action")
    parse_mode: ParseMode = Field(default="lenient", description="strict: exact action syntax only")
    max_action_length: int = Field(
        default=64, ge=1, le=MAX_ACTION_LENGTH, description="longer replies are invalid actions"
    )


@dataclass(frozen=True)
class Outcome:
    """What a parsed action did to the game: the env's reward and whether the episode ended."""

    reward: float
    terminated: bool = False
    success: bool = False
    message: str = ""  # a short line shown above the rendered state (e.g. a calculator result)
    invalid: bool = False  # the turn was an invalid action (unparseable, or e.g. a malformed calc expression)


class TextEnv(gymnasium.Env[str, str], Generic[Parsed], metaclass=ABCMeta):
    """Base class; see the module docstring for the contract."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # gymnasium declares it an instance attribute
    Config: ClassVar[type[TextEnvConfig]] = TextEnvConfig
    instructions: str = ""
    invalid_hint: ClassVar[str] = "Invalid action."

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"{type(self).__name__}: render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.config = validate(self.Config, kwargs, source=f"{type(self).__name__} kwargs")
        self.observation_space = Text(max_length=self._max_observation_length(), min_length=0, charset=CHARSET)
        self.action_space = Text(max_length=self.config.max_action_length, min_length=0, charset=CHARSET)
        self._turn = 0
        self._started = False
        self._done = False

    # ----------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._new_episode(self.np_random, options or {})
        self._turn = 0
        self._started = True
        self._done = False
        return self._render(), {"turn": 0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step() called after the episode ended; call reset()")
        if not isinstance(action, str):
            raise TypeError(f"{type(self).__name__}.step() takes the reply text (str), got {type(action).__name__}")
        self._turn += 1
        too_long = len(action) > self.config.max_action_length
        parsed = None if too_long else self._parse(action, self.config.parse_mode)
        outcome = self._invalid(self.invalid_hint) if parsed is None else self._apply(parsed)
        truncated = not outcome.terminated and self._turn >= self.config.max_steps
        self._done = outcome.terminated or truncated
        info: dict[str, Any] = {"turn": self._turn, "invalid_action": outcome.invalid}
        if self._done:
            info["success"] = outcome.success
        observation = self._render()
        if outcome.message:
            observation = f"{outcome.message}\n{observation}" if observation else outcome.message
        return observation, float(outcome.reward), outcome.terminated, truncated, info

    def render(self) -> str | None:
        return self._render() if self.render_mode == "ansi" else None

    def expert_action(self) -> str | None:
        """The optimal next action from the current state, or None (no solution, or episode over)."""
        if not self._started or self._done:
            return None
        return self._expert()

    @property
    def turn(self) -> int:
        return self._turn

    def _invalid(self, message: str) -> Outcome:
        """An invalid action's outcome: the penalty, no state change, and ``message`` for the model."""
        return Outcome(reward=self.config.invalid_penalty, message=message, invalid=True)

    # ----------------------------------------------------------------- hooks for subclasses
    @abstractmethod
    def _new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Build the episode's state from ``rng`` only (determinism) or from ``options``."""

    @abstractmethod
    def _parse(self, action: str, mode: ParseMode) -> Parsed | None:
        """The parsed action, or None when the text is not a valid action in ``mode``."""

    @abstractmethod
    def _apply(self, parsed: Parsed) -> Outcome:
        """Apply a parsed action to the state."""

    @abstractmethod
    def _render(self) -> str:
        """The current state as compact text (the observation)."""

    @abstractmethod
    def _expert(self) -> str | None:
        """The solver's optimal next action text from the current state."""

    @abstractmethod
    def _max_observation_length(self) -> int:
        """Upper bound of an observation's length, for the observation Text space."""
