"""Reward functions by path: TRL's and verl's conventions, weights, and failures that fail one trajectory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.trajectory import Trajectory
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.data.config import RewardFunctionConfig
from rollarc.data.env import DatasetEnv
from rollarc.data.math_reward import accuracy, compute_score
from rollarc.data.reward_fn import RewardLoadError, load_reward_function
from rollarc.engine.types import Completion, SamplingParams
from rollarc.envs.registry import make_env
from rollarc.models import new_policy

_, TOKENIZER = new_policy("nano")
RENDERER = ChatRenderer(TOKENIZER)

ANSWERS = ["\\boxed{7}", "The answer is 7.", "7.0", "\\boxed{8}", "", "14/2", "\\boxed{7} or \\boxed{9}", "seven"]


def write_rows(tmp_path: Path, conversational: bool = False) -> str:
    items = []
    for i in range(6):  # row i asks i+7
        prompt: Any = f"{i}+7=" if not conversational else [{"role": "user", "content": f"{i}+7="}]
        items.append(
            {"prompt": prompt, "data_source": "arith", "ground_truth": str(i + 7), "difficulty": i, "solution": "x"}
        )
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return str(path)


def env_of(path: str, *functions: dict[str, Any], **extra: Any) -> DatasetEnv:
    task = TaskConfig(
        name="d", dataset={"path": path, "reward": list(functions), "ground_truth_column": "ground_truth", **extra}
    )
    env = make_env(task.env_spec)
    assert isinstance(env.unwrapped, DatasetEnv)
    return env.unwrapped


def rewards(env: DatasetEnv, answer_of: Any, seeds: range) -> list[float]:
    out = []
    for seed in seeds:
        prompt, _ = env.reset(seed=seed)
        out.append(env.step(answer_of(prompt))[1])
    return out


def test_the_math_verifier_gives_the_same_rewards_through_trl_and_verl_conventions(tmp_path):
    path = write_rows(tmp_path)
    via_trl = env_of(path, {"function": "rollarc.data.math_reward:accuracy"})
    via_verl = env_of(path, {"function": "rollarc.data.math_reward:compute_score"})
    assert via_trl.functions[0].style == "trl" and via_verl.functions[0].style == "verl"
    scores: dict[str, list[float]] = {"trl": [], "verl": []}
    for answer in ANSWERS:  # the same answer to every prompt: right for the rows whose sum is 7 (i = 0)
        scores["trl"] += rewards(via_trl, lambda p, a=answer: a, range(5))
        scores["verl"] += rewards(via_verl, lambda p, a=answer: a, range(5))
    assert scores["trl"] == scores["verl"]
    truths = []
    for seed in range(5):
        via_trl.reset(seed=seed)
        assert via_trl._row is not None
        truths.append(via_trl._row["ground_truth"])
    right = [float(t == "7") for t in truths]
    assert 1.0 in right and 0.0 in right
    by_answer = {a: scores["trl"][5 * i : 5 * i + 5] for i, a in enumerate(ANSWERS)}
    for answer in ["\\boxed{7}", "The answer is 7.", "7.0", "14/2"]:
        assert by_answer[answer] == right, answer
    assert by_answer["\\boxed{8}"] == [float(t == "8") for t in truths]
    for answer in ["", "seven"]:
        assert by_answer[answer] == [0.0] * 5, answer
    # the functions themselves, called directly
    assert accuracy(["\\boxed{7}", "8"], ground_truth=["7", "7"]) == [1.0, 0.0]
    assert accuracy([[{"role": "assistant", "content": "7"}]], reward_model=[{"ground_truth": "7"}]) == [1.0]
    assert compute_score("arith", "so \\boxed{12}", "12") == 1.0 and compute_score("arith", "\\boxed{1}", "12") == 0.0


def test_trl_functions_get_columns_and_chat_completions_and_weights_add_up(tmp_path):
    env = env_of(
        write_rows(tmp_path, conversational=True),
        {"function": "byo_rewards:exact_verl", "weight": 2.0},
        {"function": "byo_rewards:length_trl", "weight": 0.5},
        {"function": "byo_rewards:sees_columns_trl", "weight": 1.0},
        {"function": "byo_rewards:not_applicable_trl", "weight": 100.0},
    )
    prompt, info = env.reset(seed=0)
    assert info["messages"] == [{"role": "user", "content": prompt}]
    row = env._row
    assert row is not None
    truth, difficulty = row["ground_truth"], row["difficulty"]
    _, reward, _, _, info = env.step(truth)
    assert info["scores"] == [1.0, pytest.approx(0.1 * len(truth)), float(difficulty), None]
    assert reward == pytest.approx(2.0 + 0.5 * 0.1 * len(truth) + difficulty) and info["success"]


def test_a_function_that_does_not_import_or_fits_no_convention_is_a_one_line_error():
    cases = {
        "no_such_module:f": "cannot import module 'no_such_module'; is its directory in plugin_paths?",
        "byo_rewards:missing": "module 'byo_rewards' has no function 'missing'",
        "byo_rewards:neither": "fit neither TRL's",
    }
    for function, expected in cases.items():
        with pytest.raises(RewardLoadError) as err:
            load_reward_function(RewardFunctionConfig(function=function))
        assert expected in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="function"):
        RewardFunctionConfig(function="not a path")


class Replies:
    """A scripted engine: reply i of the list to the i-th prompt."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.calls = 0

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        text = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        ids = RENDERER.encode_reply(text)
        return Completion(cache_key, len(prompt_ids), ids, [-0.5] * len(ids), [3] * len(ids), 3, "stop")


def run_episodes(task: TaskConfig, replies: list[str], specs: list[EpisodeSpec]) -> tuple[list[Trajectory], Any]:
    async def go() -> tuple[list[Trajectory], Any]:
        runner = EpisodeRunner({task.name: task}, RENDERER, Replies(replies), SamplingConfig(), max_env_threads=2)
        try:
            return [await runner.run(spec) for spec in specs], runner.stats
        finally:
            runner.close()

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        ("byo_rewards:raises_trl", "reward function byo_rewards:raises_trl raised ZeroDivisionError: boom"),
        ("byo_rewards:text_trl", "reward function byo_rewards:text_trl returned 'high' (str), not a finite number"),
        ("byo_rewards:nan_verl", "reward function byo_rewards:nan_verl returned nan (float), not a finite number"),
    ],
)
def test_a_reward_function_that_raises_or_returns_a_non_number_fails_that_trajectory_alone(tmp_path, function, reason):
    task = TaskConfig(
        name="d",
        dataset={
            "path": write_rows(tmp_path),
            "ground_truth_column": "ground_truth",
            "reward": [{"function": function}],
        },
        agent=AgentConfig(max_tokens_per_turn=8),
    )
    trajs, stats = run_episodes(task, ["7"], [EpisodeSpec(f"t{i}", "d", i) for i in range(3)])
    assert [t.status for t in trajs] == ["failed"] * 3
    assert trajs[0].failure_kind == "env_step_error:RewardFunctionError"
    assert reason in (trajs[0].failure_reason or "")
    assert stats.failures.counts["env_step_error:RewardFunctionError"] == 3 and stats.failed == 3


def test_a_dataset_task_runs_through_the_episode_runner_with_heldout_rows(tmp_path):
    task = TaskConfig(
        name="d",
        dataset={
            "path": write_rows(tmp_path),
            "ground_truth_column": "ground_truth",
            "heldout_fraction": 0.5,
            "reward": [{"function": "rollarc.data.math_reward:accuracy"}],
        },
        agent=AgentConfig(max_tokens_per_turn=8),
    )
    specs = [EpisodeSpec(f"t{i}", "d", i) for i in range(3)] + [
        EpisodeSpec(f"h{i}", "d", 20_000_000 + i, greedy=True, heldout=True) for i in range(3)
    ]
    trajs, _ = run_episodes(task, ["\\boxed{7}"], specs)
    assert all(t.status == "ok" and t.num_turns == 1 and t.finish == "terminated" for t in trajs)
    assert [t.reward for t in trajs] == [float(t.success) for t in trajs]
    # training and held-out episodes saw disjoint prompts (the prompt is the segment's context text)
    prompts = [TOKENIZER.decode(t.segments[0].token_ids, skip_special_tokens=True).split("=")[0] for t in trajs]
    assert set(prompts[:3]).isdisjoint(prompts[3:]) and len(set(prompts[3:])) == 3
