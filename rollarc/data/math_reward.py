"""A math answer verifier built on ``math-verify``, in both reward conventions (one file, same scores).

Score 1.0 when the answer's last ``\\boxed{...}`` (or, failing that, a number or expression in the text)
equals the ground truth mathematically (``math_verify.parse`` + ``math_verify.verify``), else 0.0.

* TRL: ``accuracy(completions, ground_truth=..., **columns) -> list[float]``; the ground truth is the
  ``ground_truth`` column, or verl's nested ``reward_model["ground_truth"]``, or the column named by
  ``ground_truth_column`` (bound with the function's ``kwargs``: ``{ground_truth_column: answer}``).
* verl: ``compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float``.

math-verify bounds parsing with ``signal.alarm``, which works only in the main thread; rollarc scores
answers in the env worker's thread pool, where the env step's own timeout (``step_timeout_s``) bounds
the call instead, so there the library's timeout is switched off (and its one-off notice saying so,
repeated by every env worker thread, is filtered out of its loggers; every other message still shows).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from math_verify import parse, verify

TIMEOUT_S = 5


def _not_the_timeout_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_not_the_timeout_notice)


def math_score(solution_str: str, ground_truth: Any) -> float:
    """1.0 if ``solution_str``'s answer equals ``ground_truth``, else 0.0."""
    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold = parse(str(ground_truth), parsing_timeout=timeout)
    answer = parse(solution_str, parsing_timeout=timeout)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=timeout) else 0.0


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """verl's convention."""
    return math_score(solution_str, ground_truth)


def accuracy(
    completions: list[Any],
    ground_truth: list[Any] | None = None,
    reward_model: list[Any] | None = None,
    ground_truth_column: str = "ground_truth",
    **columns: Any,
) -> list[float]:
    """TRL's convention; completions are text, or chat messages whose last one is the answer.

    The ground truth is the column ``ground_truth_column`` (bind it with the function's ``kwargs``, e.g.
    ``{ground_truth_column: answer}``; a dotted name reads a struct's field); by default the
    ``ground_truth`` column, or else verl's nested ``reward_model["ground_truth"]``.
    """
    columns = {**columns, "ground_truth": ground_truth, "reward_model": reward_model}
    if ground_truth_column == "ground_truth" and ground_truth is None and reward_model is not None:
        ground_truth_column = "reward_model.ground_truth"
    head, *fields = ground_truth_column.split(".")
    if columns.get(head) is None:
        present = sorted(name for name, value in columns.items() if value is not None and name != "prompts")
        raise ValueError(
            f"accuracy reads the ground truth from column {head!r} (ground_truth_column), which this row lacks; "
            f"its columns: {', '.join(present)}"
        )
    truths = []
    for value in columns[head]:
        for name in fields:
            value = value[name] if isinstance(value, dict) else None
        truths.append(value)
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [math_score(text, truth) for text, truth in zip(texts, truths, strict=True)]
