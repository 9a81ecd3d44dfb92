"""Reward functions for the dataset-task tests, in TRL's and verl's conventions (named by import path)."""

from __future__ import annotations

import os
import re
import time
from typing import Any


def length_trl(completions: list[Any], **_: Any) -> list[float]:
    """TRL style: 0.1 per character of the answer (plain text or chat messages)."""
    return [0.1 * len(c if isinstance(c, str) else c[-1]["content"]) for c in completions]


def sees_columns_trl(prompts: list[Any], completions: list[Any], difficulty: list[int], **_: Any) -> list[float]:
    """TRL style: reads a dataset column passed as a keyword (a list with one value per completion)."""
    return [float(d) for d in difficulty]


def not_applicable_trl(completions: list[Any], **_: Any) -> list[float | None]:
    return [None for _ in completions]


def exact_verl(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> dict[str, float]:
    """verl style, returning a dict with 'score' as verl allows."""
    return {"score": 1.0 if solution_str.strip() == str(ground_truth) else 0.0}


def raises_trl(completions: list[Any], **_: Any) -> list[float]:
    raise ZeroDivisionError("boom")


def text_trl(completions: list[Any], **_: Any) -> list[Any]:
    return ["high" for _ in completions]


def nan_verl(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    return float("nan")


def neither(answer: str) -> float:
    return 0.0


def number_tool(argument: str) -> str:
    """A buggy tool (tests/unit/test_data_tools.py): it returns a number, not text."""
    return len(argument)  # type: ignore[return-value]


def marked_trl(completions: list[Any], **_: Any) -> list[float]:
    """TRL style, for the served-reward test: raises on 'boom', takes 2 s on 'slow', scores its process id on
    'pid' (which replica to kill), else scores 0.25."""
    text = completions[0] if isinstance(completions[0], str) else completions[0][-1]["content"]
    if "boom" in text:
        raise ZeroDivisionError("boom")
    if "slow" in text:
        time.sleep(2.0)
    if "pid" in text:
        return [float(os.getpid())]
    return [0.25]


# ---- TRL's documented examples (GRPOTrainer docs, "Using a custom reward function"), as TRL shows them ----
def trl_reward_func(completions: list[Any], ground_truth: list[Any], **kwargs: Any) -> list[float]:
    """TRL's "reward completions based on a reference": the content of \\boxed{} must equal the ground truth."""
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth, strict=True)]


def trl_format_reward_func(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL's "reward completions with a specific format" on conversational completions."""
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def trl_math_reward_func(prompts: list[Any], completions: list[Any], task: list[str], **kwargs: Any) -> list[Any]:
    """TRL's multi-task example: scores math rows (here: the prompt's sum), None for the others."""
    rewards: list[float | None] = []
    for prompt, completion, t in zip(prompts, completions, task, strict=True):
        if t == "math":
            a, b = prompt.rstrip("=").split("+")
            rewards.append(1.0 if completion.strip() == str(int(a) + int(b)) else -1.0)
        else:
            rewards.append(None)
    return rewards


def docs_accuracy(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
    """docs/bring-your-own.md's TRL example on a flat dataset with an `answer` column."""
    return [1.0 if c.strip() == g else 0.0 for c, g in zip(completions, answer, strict=True)]


def needs_trainer_state(completions: list[Any], trainer_state: Any, **kwargs: Any) -> list[float]:
    return [0.0 for _ in completions]


def no_kwargs_trl(completions: list[Any], ground_truth: list[Any]) -> list[float]:
    return [0.0 for _ in completions]


def verl_without_extra_info(data_source: str, solution_str: str, ground_truth: str) -> float:
    return 1.0


def gsm8k_compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """verl's gsm8k rule (strict): the answer after '#### ' must equal the ground truth."""
    match = re.search(r"#### (\-?[0-9\.\,]+)", solution_str)
    return 1.0 if match is not None and match.group(1).replace(",", "") == ground_truth else 0.0
