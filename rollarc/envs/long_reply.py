"""Long-reply: one turn whose correct reply length is heavy-tailed, so generation is the tail.

Why: in reasoning and tool-using tasks a few replies are many times the median length, and the batch
waits for them. This env reproduces that with no env latency at all: each episode shows a random
string of ``L`` letters and asks for it copied (``op: copy``) or reversed (``op: reverse``), or shows
the number ``L`` and asks for the alphabet's first letter ``L`` times (``op: repeat``); ``L`` is
drawn from a clipped, rounded lognormal (median ``length_median``, log-scale ``length_sigma``, within
``length_min..length_max``). The policy's tokenizer is character-level, so the correct reply is ``L``
tokens plus the end token.

Why ``repeat``: RL on ``copy`` cannot improve a warm start, because its samples never solve the long
strings greedy decoding fails (docs/algorithms.md). In ``repeat`` the only decision is where to stop, and
sampling at temperature spreads the stopping point around ``L``, so groups of long replies hold exact
ones: the signal RL sharpens.

Observation at reset: ``copy kqzxwab`` (``repeat 7``). The episode ends after the first reply:

* exactly the answer: reward 1, success;
* otherwise: ``partial_credit * matches / max(L, len(reply))``, where ``matches`` counts the positions
  ``i`` where the reply and the answer agree (a reply longer or shorter than the answer loses the
  missing or extra positions); no success.

Lenient parsing strips surrounding whitespace, strict takes the reply as it is. A reply longer than
``max_action_length`` is an invalid action. The expert replies the answer. ``reset(options={"text":
"abc"})`` plays a given string (under ``repeat``, the answer: ``"aaa"`` shows ``repeat 3``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from rollarc.envs.base import MAX_ACTION_LENGTH, Outcome, ParseMode, TextEnv, TextEnvConfig

Op = Literal["copy", "reverse", "repeat"]
MAX_LENGTH = 256  # bound of length_max: the reply must fit a turn of a small model's context
MAX_MESSAGE_LENGTH = len("wrong")
OP_DESCRIPTION = (
    "the reply is the shown string copied or reversed, or the first letter repeated the shown number of times"
)


class LongReplyConfig(TextEnvConfig):
    max_steps: int = Field(default=1, ge=1, description="turns; the first reply ends the episode")
    max_action_length: int = Field(
        default=128, ge=1, le=MAX_ACTION_LENGTH, description="longer replies are invalid actions"
    )
    op: Op = Field(default="copy", description=OP_DESCRIPTION)
    alphabet: str = Field(
        default="abcdefghijklmnopqrstuvwxyz",
        min_length=2,
        pattern=r"^[a-z]+$",
        description="letters of the shown string (distinct lowercase letters)",
    )
    length_median: float = Field(default=7.0, gt=0.0, description="median of the lognormal reply length")
    length_sigma: float = Field(
        default=0.77, ge=0.0, le=3.0, description="log-scale spread of the reply length (0.77: p99 ~ 6x the median)"
    )
    length_min: int = Field(default=1, ge=1, description="shortest string (draws below are raised to it)")
    length_max: int = Field(default=64, ge=1, le=MAX_LENGTH, description="longest string (draws above are cut)")
    partial_credit: float = Field(
        default=0.5, ge=0.0, le=1.0, description="reward of a wrong reply with every position right; scaled down"
    )

    @model_validator(mode="after")
    def _ranges(self) -> LongReplyConfig:
        if self.length_min > self.length_max:
            raise ValueError(f"length_min={self.length_min} is greater than length_max={self.length_max}")
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet {self.alphabet!r} repeats a letter; give distinct letters")
        if self.max_action_length < self.length_max:
            raise ValueError(
                f"max_action_length={self.max_action_length} is below length_max={self.length_max}: the longest "
                "correct reply would be invalid; raise max_action_length"
            )
        return self


def draw_length(rng: np.random.Generator, cfg: LongReplyConfig) -> int:
    """One reply length: ``round(median * exp(sigma * Z))`` clipped to ``length_min..length_max``."""
    value = cfg.length_median * float(np.exp(cfg.length_sigma * rng.standard_normal()))
    return int(min(max(round(value), cfg.length_min), cfg.length_max))


def answer(text: str, op: Op) -> str:
    """The reply to ``text``: itself (copy, and repeat, whose text is already the answer) or reversed."""
    return text[::-1] if op == "reverse" else text


def shown(text: str, op: Op) -> str:
    """What the observation shows of ``text``: the string, or under ``repeat`` its length."""
    return str(len(text)) if op == "repeat" else text


def score(reply: str, target: str, partial_credit: float) -> float:
    """1 for the exact answer, else ``partial_credit`` times the fraction of positions right."""
    if reply == target:
        return 1.0
    matches = sum(a == b for a, b in zip(reply, target, strict=False))
    return partial_credit * matches / max(len(target), len(reply), 1)


class LongReplyEnv(TextEnv[str]):
    """Copy or reverse a string whose length is heavy-tailed: one reply per episode."""

    Config = LongReplyConfig
    config: LongReplyConfig
    invalid_hint = "Invalid action. Reply with the answer only."
    instructions = (
        "Reply with the shown letters, copied or reversed as asked, or the first letter the shown number of "
        "times, and nothing else."
    )

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.text = ""
        self.target = ""
        self._answered = False

    def _max_observation_length(self) -> int:
        return MAX_MESSAGE_LENGTH + 1 + len("reverse ") + self.config.length_max

    def _new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        cfg = self.config
        if "text" in options:
            self.text = _checked_text(options["text"], cfg)
        else:
            length = draw_length(rng, cfg)
            if cfg.op == "repeat":
                self.text = cfg.alphabet[0] * length
            else:
                letters = rng.integers(len(cfg.alphabet), size=length)
                self.text = "".join(cfg.alphabet[int(i)] for i in letters)
        self.target = answer(self.text, cfg.op)
        self._answered = False

    def _parse(self, action: str, mode: ParseMode) -> str | None:
        return action if mode == "strict" else action.strip()

    def _apply(self, parsed: str) -> Outcome:
        self._answered = True
        reward = score(parsed, self.target, self.config.partial_credit)
        success = reward == 1.0
        return Outcome(reward, terminated=True, success=success, message="correct" if success else "wrong")

    def _render(self) -> str:
        return "" if self._answered else f"{self.config.op} {shown(self.text, self.config.op)}"

    def _expert(self) -> str | None:
        return self.target


def _checked_text(text: Any, cfg: LongReplyConfig) -> str:
    letters = cfg.alphabet[0] if cfg.op == "repeat" else cfg.alphabet
    if not isinstance(text, str) or not cfg.length_min <= len(text) <= cfg.length_max or set(text) - set(letters):
        raise ValueError(
            f"long_reply options['text'] must be {cfg.length_min}..{cfg.length_max} letters of {letters!r} "
            f"(length_min, length_max, alphabet; op {cfg.op}), got {text!r}"
        )
    return text
