"""Reward functions for the dataset-task tests, in TRL's and verl's conventions (named by import path)."""

from __future__ import annotations

import os
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
