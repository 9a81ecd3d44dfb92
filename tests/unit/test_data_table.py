"""Dataset tasks read with `datasets`: files and saved directories, splits, columns, malformed rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pytest

from rollarc.config import TaskConfig
from rollarc.data.env import DatasetEnv
from rollarc.data.table import DatasetError
from rollarc.envs.registry import make_env

EXACT = [{"function": "byo_rewards:exact_verl"}]


def rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "prompt": f"{i}+1=",
            "data_source": "arith",
            "reward_model": {"ground_truth": str(i + 1)},
            "solution": str(i + 1),
            "difficulty": i % 3,
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return str(path)


def env_of(**dataset: Any) -> DatasetEnv:
    task = TaskConfig(name="d", dataset={"reward": EXACT, **dataset})
    env = make_env(task.env_spec)
    assert isinstance(env.unwrapped, DatasetEnv)
    return env.unwrapped


def one_line(err: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_jsonl_with_a_seeded_heldout_cut_is_disjoint_deterministic_and_complete(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", rows(40))
    env = env_of(path=path, heldout_fraction=0.25, split_seed=3)
    train = {env.reset(seed=s)[0] for s in range(30)}
    heldout = {env.reset(seed=s, options={"heldout": True})[0] for s in range(10)}
    assert len(train) == 30 and len(heldout) == 10  # consecutive seeds visit distinct rows
    assert train.isdisjoint(heldout) and train | heldout == {f"{i}+1=" for i in range(40)}
    again = env_of(path=path, heldout_fraction=0.25, split_seed=3)
    assert [again.reset(seed=s)[0] for s in range(30)] == [env.reset(seed=s)[0] for s in range(30)]
    other = env_of(path=path, heldout_fraction=0.25, split_seed=4)
    assert {other.reset(seed=s, options={"heldout": True})[0] for s in range(10)} != heldout
    assert env.reset(seed=30)[0] == env.reset(seed=0)[0]  # seed s plays row s mod n


def test_parquet_files_per_split_and_a_saved_directory_give_the_same_rows(tmp_path):
    datasets.Dataset.from_list(rows(6)).to_parquet(str(tmp_path / "train.parquet"))
    datasets.Dataset.from_list(rows(3, start=100)).to_parquet(str(tmp_path / "test.parquet"))
    by_files = env_of(files={"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")})
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows(6)), "test": datasets.Dataset.from_list(rows(3, start=100))}
    ).save_to_disk(str(tmp_path / "saved"))
    by_dir = env_of(path=str(tmp_path / "saved"))
    for env in (by_files, by_dir):
        assert sorted(env.reset(seed=s, options={"heldout": True})[0] for s in range(3)) == [
            "100+1=",
            "101+1=",
            "102+1=",
        ]
    assert [by_files.reset(seed=s)[0] for s in range(6)] == [by_dir.reset(seed=s)[0] for s in range(6)]


def test_a_row_is_one_answer_scored_by_the_ground_truth_and_its_reference_is_the_expert(tmp_path):
    env = env_of(path=write_jsonl(tmp_path / "a.jsonl", rows(5)), reference_column="solution")
    prompt, info = env.reset(seed=2)
    truth = str(int(prompt.split("+")[0]) + 1)
    assert env.expert_action() == truth and info["split"] == "train"
    _, reward, terminated, truncated, info = env.step(truth)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert env.expert_action() is None  # the episode is over
    env.reset(seed=2)
    assert env.step("nope")[1] == 0.0


def test_chat_message_prompts_come_whole_in_the_reset_info(tmp_path):
    chat = [
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i}*2?"}], "answer": i}
        for i in range(4)
    ]
    env = env_of(
        path=write_jsonl(tmp_path / "c.jsonl", chat),
        ground_truth_column="answer",
        system_prompt="ignored for chat prompts",
        template_plain_prompts=True,
    )
    obs, info = env.reset(seed=0)
    assert info["messages"][0] == {"role": "system", "content": "Be brief."}
    assert obs == info["messages"][-1]["content"] and env.instructions == ""


def test_missing_file_column_and_split_are_one_line_errors(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", rows(5))
    with pytest.raises(DatasetError) as err:
        env_of(path=str(tmp_path / "nope.jsonl"))
    assert "nope.jsonl does not exist" in one_line(err)
    with pytest.raises(DatasetError) as err:
        env_of(path=path, prompt_column="question")
    assert "no column 'question'; its columns: prompt, data_source, reward_model, solution, difficulty" in one_line(err)
    with pytest.raises(DatasetError) as err:
        env_of(path=path, ground_truth_column="reward_model.answer")  # a verl function needs the ground truth
    assert "no column 'reward_model.answer'" in one_line(err)
    with pytest.raises(DatasetError) as err:
        env_of(path=path, train_split="dev")
    assert "no split 'dev'" in one_line(err)


def test_malformed_rows_are_skipped_and_counted_up_to_the_cap(tmp_path):
    items = rows(20)
    items[3]["prompt"] = ""
    items[7]["reward_model"] = {"ground_truth": None}
    path = write_jsonl(tmp_path / "a.jsonl", items)
    env = env_of(path=path, max_malformed_fraction=0.1, heldout_fraction=0.2)
    bad = env.table.malformed["train"]
    assert (bad.count, bad.total, bad.example) == (2, 20, "row 3: the prompt is empty")
    seen = {env.reset(seed=s)[0] for s in range(100)} | {
        env.reset(seed=s, options={"heldout": True})[0] for s in range(10)
    }
    assert len(seen) == 18 and "7+1=" not in seen
    with pytest.raises(DatasetError) as err:
        env_of(path=path, max_malformed_fraction=0.05)
    assert one_line(err) == (
        "dataset split 'train': 2 of 20 rows are malformed (more than max_malformed_fraction=0.05), "
        "e.g. row 3: the prompt is empty"
    )


def test_a_task_is_an_env_or_a_dataset_not_both():
    with pytest.raises(ValueError, match="give exactly one of env or dataset"):
        TaskConfig(name="x", env={"id": "countdown"}, dataset={"path": "a.jsonl", "reward": EXACT})
    with pytest.raises(ValueError, match="give exactly one of env or dataset"):
        TaskConfig(name="x")
    with pytest.raises(ValueError, match=r"exactly one of dataset\.path"):
        TaskConfig(name="x", dataset={"reward": EXACT})


def test_envs_built_at_once_in_threads_read_the_files_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from rollarc.data import table

    path = write_jsonl(tmp_path / "once.jsonl", rows(30))
    before = table._load.cache_info().misses
    with ThreadPoolExecutor(8) as pool:
        envs = list(pool.map(lambda _: env_of(path=path, split_seed=11), range(16)))
    assert table._load.cache_info().misses - before == 1
    assert len({id(env.table) for env in envs}) == 1  # one shared copy
