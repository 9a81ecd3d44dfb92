"""Reward functions named by import path, in TRL's or verl's calling convention, scored one answer at a time.

* TRL: ``f(prompts, completions, **columns) -> list[float | None]``, batched. rollarc scores each
  trajectory as it finishes (nothing waits for a batch), so every call has lists of length one:
  ``prompts=[prompt]``, ``completions=[completion]`` (the text, or ``[{"role": "assistant", "content":
  text}]`` when prompts are chat messages, as in TRL) and every other column of the row as a one-item
  list. ``None`` means "does not apply" and contributes nothing, as in TRL. ``completion_ids`` and
  ``trainer_state`` are not passed.
* verl: ``compute_score(data_source, solution_str, ground_truth, extra_info) -> float`` (or a dict
  with a ``score`` entry, as verl accepts).

A function that cannot be imported, or whose parameters fit neither convention, is a
:class:`RewardLoadError` at start-up. A call that raises, or returns something other than a finite
number, is a :class:`RewardFunctionError`: that trajectory fails alone, counted with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from typing import Any, Literal

from rollarc.data.config import RewardFunctionConfig
from rollarc.envs.registry import EnvLoadError

Style = Literal["trl", "verl"]
VERL_PARAMETERS = ("data_source", "solution_str", "ground_truth", "extra_info")


class RewardLoadError(EnvLoadError):
    """A reward function that cannot be imported or called; one line naming it."""


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned a non-number for one answer; fails that trajectory only."""


@dataclass(frozen=True)
class Answer:
    """What a reward function is told about one answer."""

    prompt: str | list[dict[str, str]]
    completion: str
    columns: dict[str, Any]  # every column of the row (TRL passes all but the prompt)
    data_source: Any = None
    ground_truth: Any = None
    extra_info: Any = None


@dataclass(frozen=True)
class RewardFunction:
    name: str
    fn: Callable[..., Any]
    style: Style
    weight: float

    def score(self, answer: Answer) -> float | None:
        """The function's score of ``answer`` (None: a TRL function said it does not apply)."""
        try:
            if self.style == "verl":
                value = self.fn(
                    data_source=answer.data_source,
                    solution_str=answer.completion,
                    ground_truth=answer.ground_truth,
                    extra_info=answer.extra_info,
                )
            else:
                conversational = isinstance(answer.prompt, list)
                completion: Any = (
                    [{"role": "assistant", "content": answer.completion}] if conversational else answer.completion
                )
                columns = {k: [v] for k, v in answer.columns.items() if k not in ("prompt", "prompts", "completions")}
                value = self.fn(prompts=[answer.prompt], completions=[completion], **columns)
        except Exception as err:  # plugin boundary: a user's function may raise anything; re-raised as one kind
            raise RewardFunctionError(f"reward function {self.name} raised {type(err).__name__}: {err}") from err
        return self._number(value)

    def _number(self, value: Any) -> float | None:
        if self.style == "trl":
            if not isinstance(value, list | tuple) or len(value) != 1:
                raise RewardFunctionError(
                    f"reward function {self.name} returned {_short(value)}; a TRL-style function returns a list "
                    "with one score per completion"
                )
            value = value[0]
            if value is None:
                return None
        elif isinstance(value, dict) and "score" in value:
            value = value["score"]
        if isinstance(value, Real) and math.isfinite(float(value)):
            return float(value)
        raise RewardFunctionError(f"reward function {self.name} returned {_short(value)}, not a finite number")


def load_reward_function(spec: RewardFunctionConfig) -> RewardFunction:
    module_name, _, attr = spec.function.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise RewardLoadError(
            f"reward function {spec.function}: cannot import module {err.name!r}; is its directory in plugin_paths?"
        ) from err
    except ImportError as err:
        raise RewardLoadError(f"reward function {spec.function}: importing it failed: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise RewardLoadError(f"reward function {spec.function}: module {module_name!r} has no function {attr!r}")
    return RewardFunction(spec.function, fn, _style(spec, fn), spec.weight)


def _style(spec: RewardFunctionConfig, fn: Callable[..., Any]) -> Style:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: only an explicit style can say
        if spec.style == "auto":
            raise RewardLoadError(
                f"reward function {spec.function}: no signature to read; set style: trl or verl"
            ) from None
        return spec.style
    style: Style
    if spec.style != "auto":
        style = spec.style
    elif "solution_str" in parameters:
        style = "verl"
    elif "completions" in parameters:
        style = "trl"
    else:
        raise RewardLoadError(
            f"reward function {spec.function}: its parameters ({', '.join(parameters)}) fit neither TRL's "
            "(completions, **columns) nor verl's (data_source, solution_str, ground_truth, extra_info); set style"
        )
    if style == "verl":
        missing = [p for p in ("solution_str", "ground_truth") if p not in parameters]
        if missing and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            raise RewardLoadError(f"reward function {spec.function}: a verl-style function needs {', '.join(missing)}")
    return style


def _short(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"
