"""The tool-use demo: its dataset regenerates byte for byte, and a row's demonstration is one reply per turn.

A list in ``reference_column`` makes ``expert_action`` a multi-turn expert (the Hermes call, then the answer
after the sandbox's result); the SFT demonstration it yields is one token-in, token-out segment whose
assistant tokens are exactly the two replies, and the tool turns are counted on the trajectory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rollarc.agent.chat import ChatRenderer
from rollarc.config import SamplingConfig, TaskConfig, load_train_config
from rollarc.data.tool_calls import ToolCall, parse_hermes
from rollarc.models import new_policy
from rollarc.train.demos import demonstration
from tests.unit.test_data_rewards import env_of
from tests.unit.test_tool_calls import call, play

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tooluse"
ACCURACY = {"function": "rollarc.data.math_reward:accuracy"}
PYTHON = {"python": {"function": "rollarc.data.sandbox:python", "kwargs": {"wall_s": 5}}}


def _rows(split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXAMPLES / f"products_{split}.jsonl").read_text().splitlines()]


def test_the_checked_in_files_are_the_generators_byte_for_byte(tmp_path):
    subprocess.run(
        [sys.executable, str(EXAMPLES / "generate_products.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for name in ("products_train.jsonl", "products_test.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes()


def test_each_row_demonstrates_a_python_call_of_its_product_then_the_answer():
    train, test = _rows("train"), _rows("test")
    assert (len(train), len(test)) == (400, 100)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for row in train + test:
        a, b = (int(n) for n in row["prompt"].removesuffix("=").split("*"))
        assert 10 <= a <= 999 and 10 <= b <= 99
        assert (row["answer"], row["tool"]) == (str(a * b), "python")
        first, second = row["demo"]
        assert parse_hermes(first) == [ToolCall("python", {"code": f"print({a}*{b})"})]
        assert second == row["answer"]


def _env(tmp_path: Path, reference: Any) -> Any:
    row = {"prompt": "12*34=", "ground_truth": "408", "tool": "python", "demo": reference}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    return env_of(
        str(tmp_path / "rows.jsonl"),
        ACCURACY,
        reference_column="demo",
        tool_column="tool",
        tool_format="hermes",
        tools=PYTHON,
        heldout_fraction=0.5,
    )


def test_a_list_reference_is_the_experts_reply_turn_by_turn(tmp_path):
    env = _env(tmp_path, [call("python", code="print(12*34)"), "408"])
    env.reset(seed=0)
    assert env.expert_action() == '<tool_call>\n{"name": "python", "arguments": {"code": "print(12*34)"}}\n</tool_call>'
    observation, reward, terminated, _, info = env.step(env.expert_action())
    assert (observation, reward, terminated) == ("408", 0.0, False)  # the sandbox printed the product
    assert (info["tool_calls"], info["tool_errors"]) == (1, 0)
    assert env.expert_action() == "408"
    _, reward, terminated, _, info = env.step("408")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    assert env.expert_action() is None  # the episode is over


def test_a_list_shorter_than_the_episode_runs_out_and_a_text_reference_is_every_turns_reply(tmp_path):
    (tmp_path / "short").mkdir()
    env = _env(tmp_path / "short", [call("python", code="print(1)")])
    env.reset(seed=0)
    env.step(env.expert_action())
    assert env.expert_action() is None
    single = _env(tmp_path, "408")
    single.reset(seed=0)
    assert single.expert_action() == "408"


def test_the_demonstration_is_one_segment_whose_assistant_tokens_are_the_two_replies(tmp_path):
    reference = [call("python", code="print(12*34)"), "408"]
    rows = tmp_path / "rows.jsonl"
    row = {"prompt": "12*34=", "answer": "408", "tool": "python", "demo": reference}
    rows.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    task = TaskConfig(
        name="products",
        dataset={
            "path": str(rows),
            "heldout_fraction": 0.5,
            "reference_column": "demo",
            "template_plain_prompts": True,
            "reward": [{**ACCURACY, "kwargs": {"ground_truth_column": "answer"}}],
            "tool_column": "tool",
            "tool_format": "hermes",
            "tools": PYTHON,
            "max_tool_calls": 1,
        },
        agent={"max_turns": 2, "max_tokens_per_turn": 88, "context_limit": 192, "instructions": False},
    )
    _, tokenizer = new_policy("nano")
    renderer = ChatRenderer(tokenizer)
    traj = demonstration(task, 0, renderer, SamplingConfig())
    assert (traj.status, traj.success, traj.num_turns, traj.tool_calls, traj.tool_errors) == ("ok", True, 2, 1, 0)
    (segment,) = traj.segments  # each prompt extends the last: token-in, token-out
    trained = [t for t, m in zip(segment.token_ids, segment.assistant_mask, strict=True) if m]
    assert trained == renderer.encode_reply(reference[0]) + renderer.encode_reply("408")
    assert tokenizer.decode(segment.token_ids) == (
        "<|user|>12*34=<|end|><|assistant|>" + reference[0] + "<|end|><|user|>408<|end|><|assistant|>408<|end|>"
    )


def test_a_malformed_call_is_counted_as_a_tool_error_on_the_trajectory(tmp_path):
    env = _env(tmp_path, "408")
    _, tokenizer = new_policy("nano")
    traj, _ = play(env, ChatRenderer(tokenizer), ["<tool_call>{oops}</tool_call>", "408"])
    assert (traj.num_turns, traj.tool_calls, traj.tool_errors, traj.invalid_actions, traj.success) == (2, 1, 1, 1, True)


def test_the_notool_variant_is_the_same_task_without_the_tool():
    tool = load_train_config(str(ROOT / "configs" / "tooluse.yaml"))
    bare = load_train_config(str(ROOT / "configs" / "tooluse_notool.yaml"))
    with_tool, without = tool.tasks[0].dataset, bare.tasks[0].dataset
    assert with_tool is not None and without is not None
    assert (sorted(with_tool.tools), with_tool.reference_column) == (["python"], "demo")
    assert (without.tools, without.tool_column, without.reference_column) == ({}, None, "answer")
    assert with_tool.files == without.files and with_tool.reward == without.reward
    assert (tool.model, tool.sft, tool.train, tool.algo) == (bare.model, bare.sft, bare.train, bare.algo)
