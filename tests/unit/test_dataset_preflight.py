"""A dataset task's bad inputs fail at start-up in one line naming tasks[i].dataset; skipped rows are warned about."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.config import TaskConfig
from rollarc.train.preflight import PreflightError, check_envs


def task(path: Path, **dataset: Any) -> TaskConfig:
    return TaskConfig(
        name="d",
        dataset={"path": str(path), "reward": [{"function": "rollarc.data.math_reward:compute_score"}], **dataset},
    )


def write(path: Path, prompts: list[Any]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "reward_model": {"ground_truth": "1"}}) + "\n" for p in prompts))
    return path


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (
            {"reward": [{"function": "no_such_rewards:score"}]},
            "tasks[0].dataset (d): reward function no_such_rewards:score: cannot import module 'no_such_rewards'; "
            "is its directory in plugin_paths?",
        ),
        (
            {"prompt_column": "question"},
            "tasks[0].dataset (d): dataset split 'train' has no column 'question'; its columns: prompt, reward_model",
        ),
        (
            {"max_malformed_fraction": 0.0},
            "tasks[0].dataset (d): dataset split 'train': 1 of 10 rows are malformed (more than "
            "max_malformed_fraction=0), e.g. row 4: the prompt (int) is neither text nor a list of chat messages",
        ),
    ],
)
def test_bad_dataset_inputs_fail_in_one_line(tmp_path, dataset, message):
    path = write(tmp_path / "rows.jsonl", ["1+0="] * 4 + [5] + ["0+1="] * 5)
    with pytest.raises(PreflightError) as err:
        check_envs([task(path, **dataset)], seed=0)
    assert str(err.value) == message


def test_skipped_malformed_rows_are_warned_about_with_the_count(tmp_path):
    path = write(tmp_path / "rows.jsonl", ["1+0="] * 4 + [""] + ["0+1="] * 15)
    warnings: list[str] = []
    experts = check_envs([task(path, max_malformed_fraction=0.1)], seed=0, warn=warnings.append)
    assert experts == {"d": False}  # no reference_column: no expert for SFT
    assert warnings == [
        "warning: tasks[0].dataset (d): skipped 1 malformed row(s) of 20 in split 'train', e.g. row 4: the prompt is empty"
    ]
