"""Tool calls in the model's own chat format: Hermes/Qwen <tool_call> JSON, tool-role results, schemas to the template."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.loop import run_trajectory, window
from rollarc.agent.trajectory import Trajectory
from rollarc.config import AgentConfig, SamplingConfig
from rollarc.data.tool_calls import ToolCall, ToolParserError, load_parser, parse_hermes, parse_tag
from rollarc.data.tools import ToolLoadError, load_tool
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models import new_policy
from rollarc.models.tokenizer import CHAT_TEMPLATE
from tests.unit.test_data_rewards import env_of

ACCURACY = {"function": "rollarc.data.math_reward:accuracy"}
TOOLS = {"calculator": "rollarc.data.tools:calculator", "upper": "byo_tools:upper_tool"}
# the tiny tokenizer's template, plus a tools header and (by naming "tool") a tool role
TOOL_TEMPLATE = (
    "{% if tools %}{{ '<|system|>tools:' + (tools | map(attribute='function') | map(attribute='name') | join(',')) + '<|end|>' }}{% endif %}"
    + CHAT_TEMPLATE
)


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def write_rows(tmp_path: Path, tools: Any, name: str = "rows") -> str:
    rows = [{"prompt": f"({i}+3)*12=", "ground_truth": str((i + 3) * 12), "tool": tools} for i in range(3)]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def hermes_env(path: str, **extra: Any) -> Any:
    return env_of(path, ACCURACY, tool_column="tool", tools=TOOLS, tool_format="hermes", **extra)


def test_the_hermes_parser_reads_every_call_and_names_what_is_malformed():
    reply = "I will compute. " + call("calculator", expression="6*7") + " and " + call("upper", text="a")
    assert parse_hermes(reply) == [ToolCall("calculator", {"expression": "6*7"}), ToolCall("upper", {"text": "a"})]
    # arguments as a JSON string (OpenAI's wire format) are accepted; an unclosed last call is read to the end
    assert parse_hermes('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}') == [ToolCall("f", {"x": 1})]
    assert parse_hermes("no call here") == []
    bad = parse_hermes("<tool_call>{name: f}</tool_call><tool_call>[1]</tool_call>")
    assert [c.error for c in bad] == [
        "the tool call is not valid JSON (Expecting property name enclosed in double quotes at character 1)",
        'a tool call must be a JSON object {"name": ..., "arguments": {...}}',
    ]
    assert parse_hermes('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')[0].error == (
        "the arguments of f are not a JSON object"
    )
    assert parse_tag("x <tool> 1+2 </tool> <tool>3</tool>") == [ToolCall(None, "1+2")]
    assert load_parser("hermes") is parse_hermes and load_parser("tag") is parse_tag
    assert load_parser("byo_tools:first_word_parser")("calc 1+2") == [ToolCall("calc", {"expression": "1+2"})]
    with pytest.raises(ToolParserError, match="has no function 'nope'"):
        load_parser("byo_tools:nope")


def test_one_tool_function_serves_both_formats_and_has_a_schema():
    tool = load_tool("calculator", "rollarc.data.tools:calculator")
    assert tool.call("6*7") == tool.call({"expression": "6*7"}) == "42"
    assert (
        tool.call({"expr": "1"})
        == "error: wrong arguments for tool calculator: missing a required argument: 'expression'"
    )
    assert tool.schema()["function"]["parameters"] == {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "the arithmetic to evaluate, e.g. (2+3)*12"}},
        "required": ["expression"],
    }


def test_a_hermes_turn_runs_every_call_in_order_and_errors_go_back_to_the_model(tmp_path):
    env = hermes_env(write_rows(tmp_path, ["calculator", "upper"]), max_tool_calls=5)
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["calculator", "upper"]
    reply = call("calculator", expression="6*7") + call("upper", text="ok") + "<tool_call>{oops</tool_call>"
    obs, reward, done, _, info = env.step(reply + call("search", q="x"))
    assert [m["role"] for m in info["messages"]] == ["tool"] * 4
    assert [m["content"] for m in info["messages"]] == [
        "42",
        "OK",
        "error: the tool call is not valid JSON (Expecting property name enclosed in double quotes at character 1)",
        "error: unknown tool 'search'; the tools are ['calculator', 'upper']",
    ]
    assert (reward, done, info["tool_calls"], info["tool_errors"], info["invalid_action"]) == (0.0, False, 4, 2, True)
    assert info["tool_call"] == "calculator,upper" and obs.startswith("42\nOK\n")
    # the fifth call is the last allowed one; a sixth in the same reply is refused, the episode goes on
    _, _, done, _, info = env.step(call("calculator", expression="1") + call("calculator", expression="2"))
    assert [m["content"] for m in info["messages"]] == [
        "1",
        "error: no tool calls left (at most 5 per episode); answer now",
    ]
    _, reward, done, _, info = env.step(call("calculator", expression="36") + " \\boxed{36}")  # budget spent: answer
    assert (reward, done, info["success"]) == (1.0, True, True)


def test_a_row_naming_one_tool_as_text_still_works_with_hermes_and_rows_may_not_hold_numbers(tmp_path):
    env = hermes_env(write_rows(tmp_path, "calculator"))
    _, info = env.reset(seed=1)
    assert [t["function"]["name"] for t in info["tools"]] == ["calculator"]
    _, _, _, _, info = env.step(call("upper", text="a"))  # not this row's tool
    assert info["messages"] == [
        {"role": "tool", "content": "error: unknown tool 'upper'; the tools are ['calculator']"}
    ]
    with pytest.raises(ToolLoadError, match=r"column 'tool' holds 7: give a tool name"):
        hermes_env(write_rows(tmp_path, 7, "numbers"))


class Engine:
    """Replies the scripted texts in turn; records the prompts and the ids it generated."""

    def __init__(self, renderer: ChatRenderer, replies: list[str]) -> None:
        self.renderer, self.replies, self.prompts, self.generated = renderer, replies, [], []  # type: ignore[var-annotated]

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        self.prompts.append(list(prompt_ids))
        ids = self.renderer.encode_reply(self.replies[len(self.generated)])
        self.generated.append(ids)
        return Completion(cache_key, len(prompt_ids), ids, [-0.25] * len(ids), [1] * len(ids), 1, "stop")


def play(env: Any, renderer: ChatRenderer, replies: list[str]) -> tuple[Trajectory, Engine]:
    engine = Engine(renderer, replies)

    async def env_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    agent = AgentConfig(max_turns=4, max_tokens_per_turn=64, context_limit=4096)
    traj = Trajectory("t0", "d", 0)
    return asyncio.run(run_trajectory(env, renderer, engine, agent, SamplingConfig(), traj, env_call)), engine


@pytest.mark.parametrize("template", [TOOL_TEMPLATE, CHAT_TEMPLATE])
def test_token_in_token_out_holds_across_tool_turns(tmp_path, template):
    _, tokenizer = new_policy("nano")
    tokenizer.chat_template = template
    renderer = ChatRenderer(tokenizer)
    env = hermes_env(write_rows(tmp_path, ["calculator", "upper"]), template_plain_prompts=True)
    first = call("calculator", expression="(0+3)*12") + call("upper", text="ok")
    traj, engine = play(env, renderer, [first, "\\boxed{36}"])
    assert (traj.status, traj.num_turns, traj.finish, traj.invalid_actions) == ("ok", 2, "terminated", 0)
    # one segment: each prompt extends the last, and the assistant tokens are exactly the engine's ids
    assert len(traj.segments) == 1
    segment = traj.segments[0]
    assert [t for t, m in zip(segment.token_ids, segment.assistant_mask, strict=True) if m] == [
        t for ids in engine.generated for t in ids
    ]
    assert (
        engine.prompts[1][: len(engine.prompts[0]) + len(engine.generated[0])]
        == engine.prompts[0] + engine.generated[0]
    )
    tail = tokenizer.decode(engine.prompts[1][len(engine.prompts[0]) + len(engine.generated[0]) :])
    role = "tool" if template == TOOL_TEMPLATE else "user"  # a template without a tool role: results as user turns
    assert tail == f"<|{role}|>36<|end|><|{role}|>OK<|end|><|assistant|>"
    head = tokenizer.decode(engine.prompts[0])
    assert head.startswith("<|system|>tools:calculator,upper<|end|>") == (template == TOOL_TEMPLATE)
    assert renderer.tool_role == (template == TOOL_TEMPLATE)


def test_the_renderer_keys_its_cache_on_the_tools():
    _, tokenizer = new_policy("nano")
    tokenizer.chat_template = TOOL_TEMPLATE
    renderer = ChatRenderer(tokenizer)
    messages = [Message("user", "hi")]
    schema = [load_tool("calculator", "rollarc.data.tools:calculator").schema()]
    assert renderer.prompt_ids(messages) != renderer.prompt_ids(messages, tools=schema)
    assert tokenizer.decode(renderer.prompt_ids(messages, tools=schema)).startswith("<|system|>tools:calculator")


def test_the_last_k_window_keeps_every_tool_message_of_an_exchange():
    system, user = Message("system", "s"), Message("user", "q")
    first, second = Message("assistant", "a1"), Message("assistant", "a2")
    t1, t2, t3 = Message("tool", "1"), Message("tool", "2"), Message("tool", "3")
    messages = [system, user, first, t1, t2, second, t3]
    assert window(messages, "last_k", 1) == [system, t1, t2, second, t3]  # both results of the first call turn
    assert window(messages, "last_k", 0) == [system, t3]
    assert window(messages, "last_k", 5) == messages
