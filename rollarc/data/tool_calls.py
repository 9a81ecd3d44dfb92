"""Tool-call parsers: the calls a model reply makes, in the model's own chat format (``dataset.tool_format``).

Why several: a model calls tools in the format it was trained on. ``hermes`` is the format of Qwen2.5/3,
Hermes and most open chat models (and of vLLM's ``hermes`` tool parser and verl's ``HermesToolParser``)::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(6*7)"}}
    </tool_call>

Several calls in one reply are all returned, in order. ``tag`` is rollarc's original private format,
``<tool>ARGUMENT</tool>`` (the first one only), which names no tool: it calls the row's tool with the text.
A parser is any function ``reply -> list[ToolCall]``; ``dataset.tool_format`` names a shipped one or one
by import path (``package.module:function``).

A malformed call (not JSON, not an object, no name, arguments that are not an object) is a
:class:`ToolCall` with ``error`` set: the env shows the error to the model as that call's result, and the
trajectory goes on, as it would with a real tool server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollarc.data.by_path import import_function
from rollarc.envs.registry import EnvLoadError

TAG_CALL = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
# vLLM's hermes parser: a closed call, or an unclosed one running to the end (generation stopped inside it)
HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call: a tool name (None for the tag format: the row's tool) and its arguments, or why it is malformed."""

    name: str | None
    arguments: dict[str, Any] | str = field(default_factory=dict)
    error: str | None = None


ToolParser = Callable[[str], list[ToolCall]]


def parse_tag(reply: str) -> list[ToolCall]:
    """The first ``<tool>ARGUMENT</tool>`` as a call of the row's tool (none when the reply has no such tag)."""
    match = TAG_CALL.search(reply)
    return [] if match is None else [ToolCall(None, match.group(1).strip())]


def parse_hermes(reply: str) -> list[ToolCall]:
    """Every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``reply``, in order."""
    calls = []
    for match in HERMES_CALL.finditer(reply):
        calls.append(_hermes_call((match.group(1) if match.group(1) is not None else match.group(2)).strip()))
    return calls


def _hermes_call(body: str) -> ToolCall:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        return ToolCall(None, error=f"the tool call is not valid JSON ({err.msg} at character {err.pos})")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall(None, error='a tool call must be a JSON object {"name": ..., "arguments": {...}}')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI's API does
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ToolCall(data["name"], error=f"the arguments of {data['name']} are not a JSON object")
    if not isinstance(arguments, dict):
        return ToolCall(data["name"], error=f"the arguments of {data['name']} are not a JSON object")
    return ToolCall(data["name"], arguments)


PARSERS: dict[str, ToolParser] = {"tag": parse_tag, "hermes": parse_hermes}


class ToolParserError(EnvLoadError):
    """``dataset.tool_format`` names no shipped parser and no importable function."""


def load_parser(spec: str) -> ToolParser:
    """A shipped parser by name, or a function by ``package.module:function``; a one-line error otherwise."""
    if spec in PARSERS:
        return PARSERS[spec]
    if ":" not in spec:
        raise ToolParserError(
            f"dataset.tool_format {spec!r}: not one of {sorted(PARSERS)} nor a 'package.module:function' parser"
        )
    return import_function(spec, f"dataset.tool_format {spec!r}", ToolParserError)
