"""Tools a dataset row may name: functions by import path, returning text, called from the model's replies.

A multi-turn dataset task (``dataset.tool_column``) lets each row name tools of ``dataset.tools``. How the
model calls them is ``dataset.tool_format`` (parsers in :mod:`rollarc.data.tool_calls`):

* ``tag`` (one tool per row): ``<tool>ARGUMENT</tool>`` calls the row's tool with the text ``ARGUMENT``,
  ``fn(ARGUMENT)``; the next observation is ``<result>OUTPUT</result>`` (a user message).
* ``hermes`` (or a parser by import path): ``<tool_call>{"name": N, "arguments": {...}}</tool_call>``
  calls tool ``N`` with the arguments as keywords, ``fn(**arguments)``; each call's output comes back as a
  ``tool``-role message. The tools' JSON schemas (OpenAI function format) go to the chat template
  (``tools=``): from ``dataset.tool_schemas``, else from the function's type hints and docstring.

So one function serves both formats when its first parameter takes the text: ``calculator(expression)``
is ``<tool>1+2</tool>`` or ``{"name": "calculator", "arguments": {"expression": "1+2"}}``. A reply without
a call is the answer the reward functions score.

The argument is model output, so hostile input: a tool must parse it safely (the shipped ``calculator``
goes through :mod:`rollarc.envs.safe_arith`, never ``eval``). A tool signals input it cannot use by raising
:class:`ToolInputError` (or a ``ValueError``); the model then sees ``<result>error: ...</result>``, as it
would from a real tool. Anything else a tool raises is a bug in it and fails that trajectory alone (the env
worker counts it).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

from rollarc.data.by_path import import_function
from rollarc.data.config import ToolConfig
from rollarc.data.tool_calls import parse_tag
from rollarc.envs.registry import EnvLoadError
from rollarc.envs.safe_arith import ArithError, evaluate, format_number

ARG_LINE = re.compile(r"^\s+(\w+)(?: \(.*?\))?:(.*)$", re.MULTILINE)  # "    name: description" under Args:
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
CONTEXT = ("state",)  # parameters the env passes itself (not the model): left out of the schema
MAX_OUTPUT = 1000  # characters of a tool's output shown to the model


class ToolInputError(ValueError):
    """The tool could not use its argument; the model is shown the message as the tool's result."""


class ToolLoadError(EnvLoadError):
    """A tool in ``dataset.tools`` that does not import, or a row naming a tool that is not there."""


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    fn: Callable[..., str]
    parameters: dict[str, Any] | None = field(default=None, compare=False)  # JSON schema; None: from fn
    kwargs: dict[str, Any] = field(default_factory=dict, compare=False)  # bound on every call (config)

    def call(self, arguments: str | dict[str, Any], **context: Any) -> str:
        """The tool's output, or ``error: ...`` for input it refused or arguments it does not take (cut to
        MAX_OUTPUT). A text argument is passed as it is (``tag``), an object as keywords (``hermes``);
        ``context`` (``state``: a dict kept for the episode) is passed to a tool whose signature names it.
        The configured ``kwargs`` win over the model's arguments of the same name."""
        signature = inspect.signature(self.fn)
        extra = {k: v for k, v in context.items() if k in signature.parameters} | self.kwargs
        try:
            if isinstance(arguments, str):
                bound = signature.bind(arguments, **extra)
            else:
                bound = signature.bind(**({k: v for k, v in arguments.items() if k not in extra} | extra))
        except TypeError as err:  # the model's arguments do not fit the function: its mistake, not a bug
            return f"error: wrong arguments for tool {self.name}: {err}"[:MAX_OUTPUT]
        try:
            output = self.fn(*bound.args, **bound.kwargs)
        except ValueError as err:  # ToolInputError, or a parser's ValueError: the model's input, not a bug
            output = f"error: {err}"
        if not isinstance(output, str):
            raise TypeError(f"tool {self.name} ({self.path}) returned {type(output).__name__}, not text")
        return output[:MAX_OUTPUT]

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI function format, as chat templates take it (``tools=``)."""
        doc = inspect.getdoc(self.fn) or ""
        description = doc.split("\n\n")[0].replace("\n", " ")
        parameters = self.parameters
        hidden = set(CONTEXT) | set(self.kwargs)
        if parameters is None:
            try:
                parameters = get_json_schema(self.fn)["function"]["parameters"]
                description = get_json_schema(self.fn)["function"]["description"]
            except (DocstringParsingException, TypeHintParsingException):  # no Args: section: from the signature
                parameters = signature_schema(self.fn)
        parameters = {
            **parameters,
            "properties": {k: v for k, v in parameters.get("properties", {}).items() if k not in hidden},
            "required": [k for k in parameters.get("required", []) if k not in hidden],
        }
        function = {"name": self.name, "description": description, "parameters": parameters}
        return {"type": "function", "function": function}


def signature_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON schema of ``fn``'s positional-or-keyword parameters from its type hints and its docstring's
    ``Args:`` lines (a parameter without a default is required). Keyword-only parameters are the tool's
    settings (``kwargs`` in the config), not the model's to set."""
    properties: dict[str, Any] = {}
    required = []
    hints = inspect.get_annotations(fn, eval_str=True)
    described = dict(ARG_LINE.findall((inspect.getdoc(fn) or "").partition("Args:")[2]))
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) or name in CONTEXT:
            continue
        properties[name] = {"type": JSON_TYPES.get(hints.get(name, str), "string")}
        if name in described:
            properties[name]["description"] = described[name].strip()
        if param.default is param.empty:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def tool_call(reply: str) -> str | None:
    """The argument of the first ``<tool>...</tool>`` in ``reply``, or None when the reply calls nothing."""
    calls = parse_tag(reply)
    return None if not calls else str(calls[0].arguments)


def result_text(output: str) -> str:
    """The observation that shows a tool's output to the model."""
    return f"<result>{output}</result>"


def load_tool(name: str, spec: str | ToolConfig) -> Tool:
    """Import ``module:function``; a one-line :class:`ToolLoadError` when it does not import, or when the
    configured ``kwargs`` are not parameters of the function."""
    path = spec if isinstance(spec, str) else spec.function
    fn = import_function(path, f"dataset.tools.{name} ({path})", ToolLoadError)
    if isinstance(spec, str):
        return Tool(name, path, fn)
    try:
        inspect.signature(fn).bind_partial(**spec.kwargs)
    except TypeError as err:
        raise ToolLoadError(f"dataset.tools.{name}.kwargs do not fit {path}: {err}") from err
    return Tool(name, path, fn, spec.parameters, dict(spec.kwargs))


def calculator(expression: str) -> str:
    """The exact value of ``+ - * /`` arithmetic (``7/2`` for a fraction), parsed safely.

    Args:
        expression: the arithmetic to evaluate, e.g. (2+3)*12
    """
    try:
        return format_number(evaluate(expression).value)
    except ArithError as err:
        raise ToolInputError(str(err)) from err
