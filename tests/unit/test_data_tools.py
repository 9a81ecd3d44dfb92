"""Multi-turn dataset rows with a tool: a row names a tool, replies call it, the first reply without a call is scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.agent.runner import EpisodeSpec
from rollarc.config import AgentConfig, TaskConfig
from rollarc.config.io import ConfigError, validate
from rollarc.data.tools import ToolInputError, ToolLoadError, calculator, load_tool, tool_call
from tests.unit.test_data_rewards import env_of, run_episodes

CALC = {"calculator": "rollarc.data.tools:calculator"}
ACCURACY = {"function": "rollarc.data.math_reward:accuracy"}


def write_tool_rows(tmp_path: Path, tools: list[str | None], name: str = "tool_rows") -> str:
    """Row i asks (i+3)*12 and names ``tools[i]`` (None: a plain single-turn row)."""
    rows = [{"prompt": f"({i}+3)*12=", "ground_truth": str((i + 3) * 12), "tool": t} for i, t in enumerate(tools)]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_calculator_and_call_parsing():
    assert calculator("(2+3)*12") == "60" and calculator("7/2") == "7/2"
    with pytest.raises(ToolInputError, match="not allowed"):
        calculator("__import__('os')")
    assert tool_call("let me see <tool> 36*2 </tool> then") == "36*2"
    assert tool_call("72") is None and tool_call("<tool>unclosed") is None
    assert load_tool("c", "rollarc.data.tools:calculator").call("1/0") == "error: division by zero"


def test_a_row_with_a_tool_calls_it_then_its_answer_is_scored(tmp_path):
    tools = ["calculator", None] * 5  # even rows name the calculator, odd rows none
    env = env_of(write_tool_rows(tmp_path, tools), ACCURACY, tool_column="tool", tools=CALC, max_tool_calls=2)
    seed_of = {int(env.reset(seed=s)[0][1]): s for s in range(20)}  # rows are visited in a seeded shuffled order
    i = min(r for r in seed_of if tools[r])
    prompt, _ = env.reset(seed=seed_of[i])
    assert prompt == f"({i}+3)*12="
    obs, reward, done, _, info = env.step(f"<tool>({i}+3)*12</tool>")
    assert (obs, reward, done, info["tool_call"], info["turn"]) == (
        f"<result>{(i + 3) * 12}</result>",
        0.0,
        False,
        "calculator",
        1,
    )
    obs, reward, done, _, info = env.step("<tool>3*(</tool>")
    assert obs == "<result>error: not a valid expression</result>" and not done
    # the call budget (2) is spent: this reply is the answer, whatever it holds
    obs, reward, done, _, info = env.step(f"<tool>1</tool> \\boxed{{{(i + 3) * 12}}}")
    assert (reward, done, info["turn"], info["success"]) == (1.0, True, 3, True)
    # a row without a tool stays single-turn: a call-shaped reply is just a (wrong) answer
    j = min(r for r in seed_of if not tools[r])
    env.reset(seed=seed_of[j])
    _, reward, done, _, info = env.step(f"<tool>({j}+3)*12</tool>")
    assert (reward, done, "tool_call" in info) == (0.0, True, False)


def test_a_tool_row_runs_multi_turn_through_the_episode_runner(tmp_path):
    task = TaskConfig(
        name="d",
        dataset={
            "files": {
                "train": write_tool_rows(tmp_path, ["calculator"] * 4),
                "test": write_tool_rows(tmp_path, ["calculator"], "test"),
            },
            "ground_truth_column": "ground_truth",
            "reward": [ACCURACY],
            "tool_column": "tool",
            "tools": CALC,
        },
        agent=AgentConfig(max_tokens_per_turn=16, max_turns=3),
    )
    # every row asks (i+3)*12; the scripted model asks the calculator 6*6, then answers 36: right for row 0 only
    trajs, _ = run_episodes(task, ["<tool>6*6</tool>", "\\boxed{36}"], [EpisodeSpec(f"t{s}", "d", s) for s in range(4)])
    assert all((t.status, t.num_turns, t.finish) == ("ok", 2, "terminated") for t in trajs)
    assert sorted(t.turn_rewards for t in trajs) == [[0.0, 0.0]] * 3 + [[0.0, 1.0]]
    assert sum(t.success for t in trajs) == 1


def test_tool_mistakes_are_one_line_errors_at_start_up(tmp_path):
    path = write_tool_rows(tmp_path, ["calculator", "abacus"])
    with pytest.raises(ToolLoadError, match=r"name tools \['abacus'\].*has \['calculator'\]") as err:
        env_of(path, ACCURACY, tool_column="tool", tools=CALC)
    assert "\n" not in str(err.value)
    with pytest.raises(ToolLoadError, match="has no function 'nope'"):
        env_of(path, ACCURACY, tool_column="tool", tools={"calculator": "rollarc.data.tools:nope"})
    data: dict[str, Any] = {"name": "d", "dataset": {"path": path, "reward": [ACCURACY], "tools": CALC}}
    with pytest.raises(ConfigError, match=r"dataset\.tools needs dataset\.tool_column"):
        validate(TaskConfig, data)


def test_a_tool_that_breaks_fails_that_trajectory_alone(tmp_path):
    task = TaskConfig(
        name="d",
        dataset={
            "files": {"train": write_tool_rows(tmp_path, ["t"] * 2), "test": write_tool_rows(tmp_path, ["t"], "test")},
            "ground_truth_column": "ground_truth",
            "reward": [ACCURACY],
            "tool_column": "tool",
            "tools": {"t": "byo_rewards:number_tool"},
        },
        agent=AgentConfig(max_tokens_per_turn=16, max_turns=3),
    )
    trajs, stats = run_episodes(task, ["<tool>6*6</tool>"], [EpisodeSpec(f"t{s}", "d", s) for s in range(2)])
    assert [t.status for t in trajs] == ["failed"] * 2
    assert "tool t (byo_rewards:number_tool) returned int, not text" in (trajs[0].failure_reason or "")
    assert stats.failures.counts["env_step_error:TypeError"] == 2
