"""Countdown as a multi-turn tool-use text env: reach a target from a few numbers with + - * /.

Observation at reset: ``nums 3 7 25 50 target 79``. Each turn the agent replies with one of

* ``<calc>expr</calc>``: a calculator call; the next observation starts with ``= value`` (exact,
  e.g. ``= 75`` or ``= 7/2``). Calls are free (reward 0) and do not end the episode;
* ``<answer>expr</answer>``: the final answer; the episode ends with reward 1 if ``expr`` equals the
  target and uses each given number at most once (the standard Countdown rule: not every number has
  to be used, none may be used more often than it is given, no other numbers may appear), else 0.

Arithmetic is exact (fractions) and evaluated by :mod:`rollarc.envs.safe_arith`, never ``eval``. Text
without a calc/answer tag, and a tagged expression that is not valid arithmetic or divides by zero,
is an invalid action (``invalid_penalty``, nothing changes). Strict parsing wants the reply to be
exactly one tag; lenient parsing takes the first tag anywhere in the reply, tag names in any case.
``max_steps`` turns without an answer truncate the episode (no success).

Instances are drawn uniformly among the targets that the numbers can reach (so every instance is
solvable); the expert plays the solver's fewest-operation solution: one calc per intermediate step,
then the answer. ``reset(options={"nums": [...], "target": n})`` plays a given instance.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from typing import Any, Literal, cast

import numpy as np
from pydantic import Field, model_validator

from rollarc.envs.base import MAX_ACTION_LENGTH, GenerationFailed, Outcome, ParseMode, TextEnv, TextEnvConfig
from rollarc.envs.countdown_solver import Solution, reachable
from rollarc.envs.safe_arith import ArithError, evaluate, format_number

Tag = Literal["calc", "answer"]
INVALID_HINT = "Invalid action. Use <calc>expr</calc> or <answer>expr</answer>."
MAX_SHOWN_DIGITS = 20  # longer calculator results are shown as too large (keeps observations bounded)
MAX_MESSAGE_LENGTH = 100  # bound of the line above the task (the longest error message is ~80 characters)
MAX_INSTANCE_ATTEMPTS = 1000
_STRICT = re.compile(r"<(calc|answer)>(.*)</\1>", re.DOTALL)
# Lenient tags are found one at a time (each pattern is linear: no backreference, no lazy body), then
# paired in one pass; a single regex with a lazy body and a backreference is quadratic on "<calc>" * n.
_OPEN = re.compile(r"<\s*(calc|answer)\s*>", re.IGNORECASE)
_CLOSE = re.compile(r"<\s*/\s*(calc|answer)\s*>", re.IGNORECASE)


class CountdownConfig(TextEnvConfig):
    max_steps: int = Field(default=6, ge=1, description="turns (calc calls + answer) before truncation")
    max_action_length: int = Field(
        default=96, ge=16, le=MAX_ACTION_LENGTH, description="longer replies are invalid actions"
    )
    num_count: int = Field(default=4, ge=2, le=5, description="how many numbers are given")
    num_min: int = Field(default=1, ge=1)
    num_max: int = Field(default=25, ge=1, le=1000)
    target_min: int = Field(default=10, ge=1)
    target_max: int = Field(default=100, ge=1, le=100_000)

    @model_validator(mode="after")
    def _ranges(self) -> CountdownConfig:
        if self.num_min > self.num_max:
            raise ValueError(f"num_min={self.num_min} is greater than num_max={self.num_max}")
        if self.target_min > self.target_max:
            raise ValueError(f"target_min={self.target_min} is greater than target_max={self.target_max}")
        return self


class CountdownEnv(TextEnv[tuple[Tag, str]]):
    """Reach the target with a calculator tool; every generated instance is solvable."""

    Config = CountdownConfig
    config: CountdownConfig
    invalid_hint = INVALID_HINT
    instructions = (
        "Countdown. Reach the target with + - * / and each number at most once. "
        "<calc>expr</calc> computes; finish with <answer>expr</answer>."
    )

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.numbers: tuple[int, ...] = ()
        self.target = 0
        self.solution: Solution | None = None
        self.calculated: set[str] = set()  # calc expressions already evaluated this episode (spaces removed)

    def _max_observation_length(self) -> int:
        cfg = self.config
        task = len("nums target ") + cfg.num_count * (len(str(cfg.num_max)) + 1) + len(str(cfg.target_max))
        return MAX_MESSAGE_LENGTH + 1 + task

    def _new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.calculated = set()
        if "nums" in options or "target" in options:
            self.numbers, self.target = _checked_instance(options, self.config)
        else:
            self.numbers, self.target = self._random_instance(rng)
        self.solution = reachable(tuple(sorted(self.numbers))).get(self.target)

    def _random_instance(self, rng: np.random.Generator) -> tuple[tuple[int, ...], int]:
        cfg = self.config
        for _ in range(MAX_INSTANCE_ATTEMPTS):
            numbers = tuple(int(n) for n in rng.integers(cfg.num_min, cfg.num_max + 1, size=cfg.num_count))
            found = reachable(tuple(sorted(numbers)))
            targets = sorted(
                value
                for value, solution in found.items()
                if cfg.target_min <= value <= cfg.target_max and solution.steps
            )
            if targets:
                return numbers, targets[int(rng.integers(len(targets)))]
        raise GenerationFailed(
            f"no countdown instance with {cfg.num_count} numbers in {cfg.num_min}..{cfg.num_max} reaches a target "
            f"in {cfg.target_min}..{cfg.target_max} after {MAX_INSTANCE_ATTEMPTS} draws; widen the ranges"
        )

    def _parse(self, action: str, mode: ParseMode) -> tuple[Tag, str] | None:
        return parse_action(action, mode)

    def _apply(self, parsed: tuple[Tag, str]) -> Outcome:
        tag, expression = parsed
        try:
            result = evaluate(expression)
        except ArithError as err:
            return self._invalid(f"{tag} error: {err}")
        if tag == "calc":
            shown = _short(result.value)
            if shown is None:
                return self._invalid("calc error: result too large")
            self.calculated.add(_normalise(expression))
            return Outcome(0.0, message=f"= {shown}")
        overused = Counter(result.numbers) - Counter(Fraction(n) for n in self.numbers)
        if overused:
            number = format_number(next(iter(overused)))
            return Outcome(0.0, terminated=True, message=f"wrong: {number} is not available")
        if result.value != self.target:
            shown = _short(result.value)
            return Outcome(0.0, terminated=True, message=f"wrong: = {shown}" if shown else "wrong")
        return Outcome(1.0, terminated=True, success=True, message="correct")

    def _render(self) -> str:
        return f"nums {' '.join(map(str, self.numbers))} target {self.target}"

    def _expert(self) -> str | None:
        if self.solution is None:
            return None
        turns_left = self.config.max_steps - self.turn
        for step in self.solution.steps[:-1]:
            if turns_left > 1 and step.text not in self.calculated:
                return f"<calc>{step.text}</calc>"
        return f"<answer>{self.solution.expression}</answer>"


def parse_action(action: str, mode: ParseMode) -> tuple[Tag, str] | None:
    """The (tag, expression) of a reply, or None; linear time in the reply's length in both modes.

    Strict: the reply is exactly one ``<calc>``/``<answer>`` tag. Lenient: the first opening tag (any
    case, spaces allowed inside the brackets) that has a closing tag of the same name after it, with the
    text up to the first such closing tag.
    """
    if mode == "strict":
        match = _STRICT.fullmatch(action)
        return None if match is None else (cast(Tag, match.group(1)), match.group(2))
    closes: dict[str, list[re.Match[str]]] = {"calc": [], "answer": []}
    for close in _CLOSE.finditer(action):
        closes[close.group(1).lower()].append(close)
    for opening in _OPEN.finditer(action):
        tag = opening.group(1).lower()
        if closes[tag] and closes[tag][-1].start() >= opening.end():  # a closing tag follows: take the first
            first = next(c for c in closes[tag] if c.start() >= opening.end())
            return cast(Tag, tag), action[opening.end() : first.start()]
    return None


def _short(value: Fraction) -> str | None:
    text = format_number(value)
    return text if len(text) <= MAX_SHOWN_DIGITS else None


def _normalise(expression: str) -> str:
    return "".join(expression.split())


def _checked_instance(options: dict[str, Any], cfg: CountdownConfig) -> tuple[tuple[int, ...], int]:
    """A given instance must fit the observation space, which the config's num_max/target_max size."""
    numbers, target = options.get("nums"), options.get("target")
    num_digits, target_digits = len(str(cfg.num_max)), len(str(cfg.target_max))
    if (
        not isinstance(numbers, list | tuple)
        or not 1 <= len(numbers) <= cfg.num_count
        or not all(isinstance(n, int) and n >= 1 and len(str(n)) <= num_digits for n in numbers)
    ):
        raise ValueError(
            f"countdown options['nums'] must be 1..{cfg.num_count} positive ints of at most {num_digits} digits "
            f"(num_count, num_max), got {numbers!r}"
        )
    if not isinstance(target, int) or target < 1 or len(str(target)) > target_digits:
        raise ValueError(
            f"countdown options['target'] must be a positive int of at most {target_digits} digits (target_max), "
            f"got {target!r}"
        )
    return tuple(numbers), target
