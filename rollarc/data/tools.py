"""Tools a dataset row may name: functions by import path, text in and text out, called from the model's replies.

A multi-turn dataset task (``dataset.tool_column``) lets each row name one tool of ``dataset.tools``. While
answering such a row the model may call it by writing ``<tool>ARGUMENT</tool>`` in a reply; the env calls
the tool with ``ARGUMENT`` and the next turn's observation is ``<result>OUTPUT</result>``. A reply without a
call is the answer the reward functions score.

The argument is model output, so hostile input: a tool must parse it safely (the shipped ``calculator``
goes through :mod:`rollarc.envs.safe_arith`, never ``eval``). A tool signals input it cannot use by raising
:class:`ToolInputError` (or a ``ValueError``); the model then sees ``<result>error: ...</result>``, as it
would from a real tool. Anything else a tool raises is a bug in it and fails that trajectory alone (the env
worker counts it).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from rollarc.envs.registry import EnvLoadError
from rollarc.envs.safe_arith import ArithError, evaluate, format_number

CALL = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
MAX_OUTPUT = 1000  # characters of a tool's output shown to the model


class ToolInputError(ValueError):
    """The tool could not use its argument; the model is shown the message as the tool's result."""


class ToolLoadError(EnvLoadError):
    """A tool in ``dataset.tools`` that does not import, or a row naming a tool that is not there."""


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    fn: Callable[[str], str]

    def call(self, argument: str) -> str:
        """The tool's output for ``argument``, or ``error: ...`` for input it refused (cut to MAX_OUTPUT)."""
        try:
            output = self.fn(argument)
        except ValueError as err:  # ToolInputError, or a parser's ValueError: the model's input, not a bug
            output = f"error: {err}"
        if not isinstance(output, str):
            raise TypeError(f"tool {self.name} ({self.path}) returned {type(output).__name__}, not text")
        return output[:MAX_OUTPUT]


def tool_call(reply: str) -> str | None:
    """The argument of the first ``<tool>...</tool>`` in ``reply``, or None when the reply calls nothing."""
    match = CALL.search(reply)
    return None if match is None else match.group(1).strip()


def result_text(output: str) -> str:
    """The observation that shows a tool's output to the model."""
    return f"<result>{output}</result>"


def load_tool(name: str, path: str) -> Tool:
    """Import ``module:function``; a one-line :class:`ToolLoadError` when it does not import."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ToolLoadError(f"dataset.tools.{name} ({path}): importing it failed: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ToolLoadError(f"dataset.tools.{name} ({path}): module {module_name!r} has no function {attr!r}")
    return Tool(name, path, fn)


def calculator(expression: str) -> str:
    """The exact value of ``+ - * /`` arithmetic (``7/2`` for a fraction), parsed safely."""
    try:
        return format_number(evaluate(expression).value)
    except ArithError as err:
        raise ToolInputError(str(err)) from err
