"""Tools and a tool-call parser for the tool tests (named by import path)."""

from __future__ import annotations

from rollarc.data.tool_calls import ToolCall


def upper_tool(text: str) -> str:
    """The text in capitals.

    Args:
        text: the text to capitalise
    """
    return text.upper()


def first_word_parser(reply: str) -> list[ToolCall]:
    """A custom parser: 'calc EXPR' calls the calculator with EXPR."""
    name, _, rest = reply.partition(" ")
    return [ToolCall(name, {"expression": rest})] if name == "calc" else []


def every_reply_runs_python(reply: str) -> list[ToolCall]:
    """A parser that reads every reply as a call of the python tool (printing the reply's length), so that an
    untrained policy makes tool calls in an integration run."""
    return [ToolCall("python", {"code": f"print(len({reply!r}))"})]
