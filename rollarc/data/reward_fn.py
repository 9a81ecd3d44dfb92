"""Reward functions named by import path, in TRL's or verl's calling convention, scored one answer at a time.

* TRL: ``f(prompts, completions, **columns) -> list[float | None]``, batched. rollarc scores each
  trajectory as it finishes (nothing waits for a batch), so every call has lists of length one:
  ``prompts=[prompt]``, ``completions=[completion]`` (the text, or ``[{"role": "assistant", "content":
  text}]`` when prompts are chat messages, as in TRL) and every other column of the row as a one-item
  list. ``None`` means "does not apply" and contributes nothing, as in TRL. ``completion_ids`` and
  ``trainer_state`` are not passed.
* verl: ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=) -> float`` (or a dict
  with a ``score`` entry, as verl accepts), all four by keyword, as verl's reward manager calls it.

``kwargs`` of the function's config are bound to every call (like ``functools.partial``).

A function that cannot be imported, or whose parameters fit neither convention, is a
:class:`RewardLoadError` at start-up; so is one whose required parameters the call would not fill
(:func:`check_call`, given the dataset's columns): without it, every call raised ``TypeError`` and
every trajectory failed at run time. A call that raises, or returns something other than a finite
number, is a :class:`RewardFunctionError`: that trajectory fails alone, counted with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Literal

from rollarc.data.config import RewardFunctionConfig
from rollarc.envs.registry import EnvLoadError

Style = Literal["trl", "verl"]
VERL_PARAMETERS = ("data_source", "solution_str", "ground_truth", "extra_info")
TRL_ARGUMENTS = ("prompts", "completions")  # besides the columns
TRL_NOT_PASSED = ("completion_ids", "trainer_state")  # TRL passes these; rollarc does not


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
    kwargs: dict[str, Any] = field(default_factory=dict)  # bound to every call

    def score(self, answer: Answer) -> float | None:
        """The function's score of ``answer`` (None: a TRL function said it does not apply)."""
        try:
            if self.style == "verl":
                value = self.fn(
                    data_source=answer.data_source,
                    solution_str=answer.completion,
                    ground_truth=answer.ground_truth,
                    extra_info=answer.extra_info,
                    **self.kwargs,
                )
            else:
                conversational = isinstance(answer.prompt, list)
                completion: Any = (
                    [{"role": "assistant", "content": answer.completion}] if conversational else answer.completion
                )
                columns = {k: [v] for k, v in answer.columns.items() if k not in ("prompt", "prompts", "completions")}
                value = self.fn(prompts=[answer.prompt], completions=[completion], **{**columns, **self.kwargs})
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
    style = _style(spec, fn)
    reserved = sorted(set(spec.kwargs) & set(VERL_PARAMETERS if style == "verl" else TRL_ARGUMENTS))
    if reserved:
        raise RewardLoadError(
            f"reward function {spec.function}: kwargs may not set {', '.join(reserved)}, which rollarc passes itself"
        )
    return RewardFunction(spec.function, fn, style, spec.weight, dict(spec.kwargs))


def check_call(function: RewardFunction, columns: list[str]) -> None:
    """Start-up check: each call will fill every required parameter of ``function``; else a one-line
    :class:`RewardLoadError` naming the parameter. TRL-style calls pass ``prompts``, ``completions``, every
    top-level column (``columns``) and the bound kwargs; verl-style calls pass verl's four arguments by
    keyword and the kwargs, so the function must accept all four (or take ``**kwargs``)."""
    try:
        parameters = inspect.signature(function.fn).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): nothing to check before calling it
        return
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    required = [
        name
        for name, p in parameters.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
    ]
    where = f"reward function {function.name}"
    if function.style == "verl":
        passed = set(VERL_PARAMETERS) | set(function.kwargs)
        if not takes_any:
            for name in [*VERL_PARAMETERS, *function.kwargs]:
                if name not in parameters:
                    raise RewardLoadError(
                        f"{where}: verl calls compute_score(data_source=, solution_str=, ground_truth=, extra_info=) "
                        f"and it has no parameter {name!r}; add it (e.g. {name}=None) or **kwargs"
                    )
        for name in required:
            if name not in passed:
                raise RewardLoadError(
                    f"{where}: requires parameter {name!r}, which verl's call does not pass "
                    f"({', '.join(VERL_PARAMETERS)}); give it a default or set it in kwargs"
                )
        return
    passed = set(TRL_ARGUMENTS) | {c for c in columns if c not in ("prompt", *TRL_ARGUMENTS)} | set(function.kwargs)
    unexpected = sorted(name for name in passed if name not in parameters)
    if unexpected and not takes_any:
        raise RewardLoadError(
            f"{where}: TRL passes prompts, completions and every dataset column by keyword, and it has no parameter "
            f"{unexpected[0]!r} and no **kwargs; add **kwargs, as TRL's reward functions do"
        )
    for name in required:
        if name in passed:
            continue
        if name in TRL_NOT_PASSED:
            raise RewardLoadError(
                f"{where}: requires parameter {name!r}, which TRL passes but rollarc does not; give it a default"
            )
        raise RewardLoadError(
            f"{where}: requires parameter {name!r}, but the dataset has no column {name!r} (TRL passes each "
            f"column under its own name; ground_truth_column is verl's only); its columns: {', '.join(columns)}"
        )


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
