"""Bring-your-own parity with TRL and verl (issue 43 items 1-3).

1. TRL-style reward functions get every column under its own name, checked at start-up against the dataset's
   columns; verl-style ones must take verl's four keyword arguments. TRL's own documented examples and column
   names, docs/bring-your-own.md's example and the math verifier on a flat `answer` column, a verl Parquet file.
2. Plain-text prompts reach the model as they are (TRL's way); chat prompts get the template; an option keeps
   the templated behaviour.
3. Data files as `datasets` takes them: globs, lists of files per split, directories of shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pytest
from pydantic import ValidationError

from rollarc.agent.chat import ChatRenderer
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.data.env import DatasetEnv
from rollarc.envs.registry import make_env
from rollarc.train.demos import demonstration
from rollarc.train.preflight import PreflightError, check_envs
from tests.unit.test_chat_template_prompts import first_prompt, qwen2_style_tokenizer, template_ids

# TRL's docs dataset for the ground-truth example (columns `prompt` and `ground_truth`).
TRL_ROWS = [
    {"prompt": "Problem: Solve the equation $2x + 3 = 7$. Solution:", "ground_truth": "2"},
    {"prompt": "Problem: What is the value of $\\sqrt{16}$?", "ground_truth": "4"},
]


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return str(path)


def dataset_env(**dataset: Any) -> DatasetEnv:
    env = make_env(TaskConfig(name="d", dataset=dataset).env_spec)
    assert isinstance(env.unwrapped, DatasetEnv)
    return env.unwrapped


def score(env: DatasetEnv, prompt: str, answer: str, split_rows: int = 2) -> float:
    """The reward of ``answer`` to the training row whose prompt (or last user message) is ``prompt``."""
    for seed in range(split_rows * 4):
        observation, _ = env.reset(seed=seed)
        if observation == prompt:
            return env.step(answer)[1]
    raise AssertionError(f"no training row with prompt {prompt!r}")


def startup_error(tmp_path: Path, items: list[dict[str, Any]], **dataset: Any) -> str:
    path = write_jsonl(tmp_path / "rows.jsonl", items)
    with pytest.raises(PreflightError) as err:
        check_envs([TaskConfig(name="d", dataset={"path": path, **dataset})], seed=0)
    return str(err.value)


# ---- 1. reward functions -----------------------------------------------------------------------------
def test_trls_documented_ground_truth_example_scores_on_its_own_column(tmp_path):
    rows = TRL_ROWS * 5  # enough rows for the seeded held-out cut
    env = dataset_env(
        path=write_jsonl(tmp_path / "rows.jsonl", rows), reward=[{"function": "byo_rewards:trl_reward_func"}]
    )
    assert score(env, TRL_ROWS[0]["prompt"], "2x = 4, so \\boxed{2}", 9) == 1.0
    assert score(env, TRL_ROWS[1]["prompt"], "\\boxed{4}", 9) == 1.0
    assert score(env, TRL_ROWS[1]["prompt"], "\\boxed{16}", 9) == 0.0


def test_trls_format_example_gets_conversational_completions(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"What is the result of ({i} + 2) * 4?"}]} for i in range(8)]
    env = dataset_env(
        path=write_jsonl(tmp_path / "rows.jsonl", rows),
        ground_truth_column=None,
        reward=[{"function": "byo_rewards:trl_format_reward_func"}],
    )
    prompt = "What is the result of (1 + 2) * 4?"
    assert score(env, prompt, "<think>3 * 4</think><answer>12</answer>", 8) == 1.0
    assert score(env, prompt, "12", 8) == 0.0


def test_trls_multi_task_example_reads_the_task_column_and_prompts(tmp_path):
    rows = [{"prompt": f"{i}+1=", "task": "math" if i % 2 else "code"} for i in range(10)]
    env = dataset_env(
        path=write_jsonl(tmp_path / "rows.jsonl", rows), reward=[{"function": "byo_rewards:trl_math_reward_func"}]
    )
    assert score(env, "3+1=", "4", 10) == 1.0
    assert score(env, "3+1=", "5", 10) == -1.0
    assert score(env, "2+1=", "3", 10) == 0.0  # a code row: None, adds nothing


def test_the_docs_example_and_the_math_verifier_work_on_a_flat_answer_column(tmp_path):
    rows = [{"prompt": f"{i}+7=", "answer": str(i + 7)} for i in range(10)]
    env = dataset_env(
        path=write_jsonl(tmp_path / "rows.jsonl", rows),
        reward=[
            {"function": "rollarc.data.math_reward:accuracy", "kwargs": {"ground_truth_column": "answer"}},
            {"function": "byo_rewards:docs_accuracy", "weight": 0.5},
        ],
    )
    assert score(env, "3+7=", "10", 10) == 1.5
    assert score(env, "3+7=", "\\boxed{10}", 10) == 1.0  # the verifier reads \boxed{}; the exact match does not
    assert score(env, "3+7=", "11", 10) == 0.0


def test_a_verl_parquet_file_in_verls_layout_is_scored_by_a_verl_compute_score(tmp_path):
    """verl's gsm8k preprocessing writes train.parquet and test.parquet into one directory; `path` names it."""
    instruction = 'Let\'s think step by step and output the final answer after "####".'

    def verl_row(split: str, index: int) -> dict[str, Any]:
        return {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"Natalia had {index} clips and sold 2. How many? {instruction}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(index - 2)},
            "extra_info": {"split": split, "index": index},
        }

    (tmp_path / "gsm8k").mkdir()
    for split, first in (("train", 10), ("test", 100)):
        datasets.Dataset.from_list([verl_row(split, i) for i in range(first, first + 4)]).to_parquet(
            str(tmp_path / "gsm8k" / f"{split}.parquet")
        )
    env = dataset_env(path=str(tmp_path / "gsm8k"), reward=[{"function": "byo_rewards:gsm8k_compute_score"}])
    assert sorted(env.table.splits) == ["test", "train"] and len(env.table.splits["test"]) == 4
    prompt = f"Natalia had 12 clips and sold 2. How many? {instruction}"
    assert score(env, prompt, "12 - 2 = 10\n#### 10", 4) == 1.0
    assert score(env, prompt, "#### 11", 4) == 0.0
    observation, info = env.reset(seed=0, options={"heldout": True})
    assert observation.startswith("Natalia had 10") and info["split"] == "test"


@pytest.mark.parametrize(
    ("items", "dataset", "message"),
    [
        (  # the old docs example: TRL never passes ground_truth_column's mapping
            [{"prompt": "1+1=", "answer": "2"}] * 4,
            {"ground_truth_column": "answer", "reward": [{"function": "byo_rewards:trl_reward_func"}]},
            "tasks[0].dataset (d): reward function byo_rewards:trl_reward_func: requires parameter 'ground_truth', "
            "but the dataset has no column 'ground_truth' (TRL passes each column under its own name; "
            "ground_truth_column is verl's only); its columns: prompt, answer",
        ),
        (
            [{"prompt": "1+1=", "ground_truth": "2"}] * 4,
            {"reward": [{"function": "byo_rewards:needs_trainer_state"}]},
            "tasks[0].dataset (d): reward function byo_rewards:needs_trainer_state: requires parameter "
            "'trainer_state', which TRL passes but rollarc does not; give it a default",
        ),
        (
            [{"prompt": "1+1=", "ground_truth": "2", "level": 1}] * 4,
            {"reward": [{"function": "byo_rewards:no_kwargs_trl"}]},
            "tasks[0].dataset (d): reward function byo_rewards:no_kwargs_trl: TRL passes prompts, completions and "
            "every dataset column by keyword, and it has no parameter 'level' and no **kwargs; add **kwargs, as "
            "TRL's reward functions do",
        ),
        (
            [{"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}] * 4,
            {"reward": [{"function": "byo_rewards:verl_without_extra_info"}]},
            "tasks[0].dataset (d): reward function byo_rewards:verl_without_extra_info: verl calls "
            "compute_score(data_source=, solution_str=, ground_truth=, extra_info=) and it has no parameter "
            "'extra_info'; add it (e.g. extra_info=None) or **kwargs",
        ),
        (
            [{"prompt": "1+1=", "answer": "2"}] * 4,
            {"reward": [{"function": "byo_rewards:exact_verl", "kwargs": {"ground_truth": "2"}}]},
            "tasks[0].dataset (d): reward function byo_rewards:exact_verl: kwargs may not set ground_truth, which "
            "rollarc passes itself",
        ),
    ],
)
def test_reward_functions_the_call_would_not_fit_fail_at_startup_in_one_line(tmp_path, items, dataset, message):
    assert startup_error(tmp_path, items, **dataset) == message


def test_the_math_verifier_names_a_missing_ground_truth_column(tmp_path):
    rows = [{"prompt": f"{i}+7=", "answer": str(i + 7)} for i in range(10)]
    env = dataset_env(
        path=write_jsonl(tmp_path / "rows.jsonl", rows),
        reward=[{"function": "rollarc.data.math_reward:accuracy", "kwargs": {"ground_truth_column": "solution"}}],
    )
    env.reset(seed=0)
    with pytest.raises(RuntimeError) as err:
        env.step("10")
    assert str(err.value) == (
        "reward function rollarc.data.math_reward:accuracy raised ValueError: accuracy reads the ground truth from "
        "column 'solution' (ground_truth_column), which this row lacks; its columns: answer"
    )


# ---- 2. prompts as TRL renders them ------------------------------------------------------------------
def test_plain_text_prompts_reach_the_model_as_they_are_by_default(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok")
    ids = first_prompt(tmp_path, tokenizer, "What is 12+30?")
    assert ids == tokenizer("What is 12+30?", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == "What is 12+30?"  # no role markers, no default system prompt


def test_chat_prompts_get_the_template_and_the_option_templates_plain_ones(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok")
    chat = [{"role": "user", "content": "What is 12+30?"}]
    assert first_prompt(tmp_path, tokenizer, chat) == template_ids(tokenizer, chat)
    templated = first_prompt(tmp_path, tokenizer, "What is 12+30?", template_plain_prompts=True)
    assert tokenizer.decode(templated) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 12+30?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_sft_demonstration_renders_the_prompt_as_rl_does(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok")
    rows = [{"prompt": "What is 12+30?", "ground_truth": "42"}] * 4
    task = TaskConfig(
        name="d",
        dataset={
            "path": write_jsonl(tmp_path / "rows.jsonl", rows),
            "reference_column": "ground_truth",
            "reward": [{"function": "byo_rewards:trl_reward_func"}],
        },
        agent=AgentConfig(max_tokens_per_turn=8),
    )
    renderer = ChatRenderer(tokenizer)
    segment = demonstration(task, 0, renderer, SamplingConfig()).segments[0]
    prompt = tokenizer("What is 12+30?", add_special_tokens=False)["input_ids"]
    assert segment.token_ids == prompt + renderer.encode_reply("42")
    assert segment.assistant_mask == [0] * len(prompt) + [1] * len(renderer.encode_reply("42"))


def test_a_system_prompt_on_untemplated_plain_prompts_is_refused():
    with pytest.raises(ValidationError) as err:
        TaskConfig(name="d", dataset={"path": "x.jsonl", "system_prompt": "Be brief.", "reward": [{"function": "m:f"}]})
    assert (
        "dataset.system_prompt applies to plain-text prompts only when they are templated; set "
        "dataset.template_plain_prompts: true, or put the system message in chat-message prompts"
    ) in str(err.value)


# ---- 3. data files as datasets takes them ------------------------------------------------------------
def arith(start: int, n: int) -> list[dict[str, Any]]:
    return [{"prompt": f"{i}+1=", "reward_model": {"ground_truth": str(i + 1)}} for i in range(start, start + n)]


EXACT = [{"function": "byo_rewards:exact_verl"}]


def test_a_glob_path_reads_every_matching_shard(tmp_path):
    write_jsonl(tmp_path / "part-0.jsonl", arith(0, 5))
    write_jsonl(tmp_path / "part-1.jsonl", arith(5, 5))
    write_jsonl(tmp_path / "other.jsonl", arith(50, 5))
    env = dataset_env(path=str(tmp_path / "part-*.jsonl"), reward=EXACT, heldout_fraction=0.2)
    prompts = sorted(row["prompt"] for split in env.table.splits.values() for row in split)
    assert prompts == sorted(f"{i}+1=" for i in range(10))


def test_files_take_lists_and_globs_per_split(tmp_path):
    for i in range(3):
        datasets.Dataset.from_list(arith(10 * i, 3)).to_parquet(str(tmp_path / f"train-{i:05d}.parquet"))
    write_jsonl(tmp_path / "a.jsonl", arith(100, 2))
    write_jsonl(tmp_path / "b.jsonl", arith(200, 2))
    env = dataset_env(
        files={
            "train": str(tmp_path / "train-*.parquet"),
            "test": [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
        },
        reward=EXACT,
    )
    assert len(env.table.splits["train"]) == 9
    assert [row["prompt"] for row in env.table.splits["test"]] == ["100+1=", "101+1=", "200+1=", "201+1="]


def test_a_directory_of_parquet_shards_is_split_by_file_name(tmp_path):
    (tmp_path / "data").mkdir(parents=True)
    for i in range(2):
        datasets.Dataset.from_list(arith(10 * i, 4)).to_parquet(
            str(tmp_path / "data" / f"train-{i:05d}-of-00002.parquet")
        )
    datasets.Dataset.from_list(arith(100, 3)).to_parquet(str(tmp_path / "data" / "test-00000-of-00001.parquet"))
    env = dataset_env(path=str(tmp_path), reward=EXACT)
    assert len(env.table.splits["train"]) == 8 and len(env.table.splits["test"]) == 3


def test_a_directory_of_shards_without_split_names_is_the_train_split(tmp_path):
    write_jsonl(tmp_path / "shard_a.jsonl", arith(0, 5))
    write_jsonl(tmp_path / "shard_b.jsonl", arith(5, 5))
    env = dataset_env(path=str(tmp_path), reward=EXACT, heldout_fraction=0.2)
    assert len(env.table.splits["train"]) == 8 and len(env.table.splits["test"]) == 2


def test_a_glob_that_matches_nothing_and_a_split_of_mixed_formats_fail_in_one_line(tmp_path):
    pattern = str(tmp_path / "missing-*.parquet")
    with pytest.raises(PreflightError) as err:
        check_envs([TaskConfig(name="d", dataset={"path": pattern, "reward": EXACT})], seed=0)
    assert str(err.value) == f"tasks[0].dataset (d): dataset file pattern {pattern} matches no file"
    a = write_jsonl(tmp_path / "a.jsonl", arith(0, 3))
    datasets.Dataset.from_list(arith(3, 3)).to_parquet(str(tmp_path / "b.parquet"))
    files = {"train": [a, str(tmp_path / "b.parquet")]}
    with pytest.raises(PreflightError) as err:
        check_envs([TaskConfig(name="d", dataset={"files": files, "reward": EXACT})], seed=0)
    assert str(err.value) == (
        "tasks[0].dataset (d): dataset.files: the files of split 'train' mix formats (.jsonl, .parquet); "
        "a split's files share one"
    )
