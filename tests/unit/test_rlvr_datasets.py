"""The RLVR demos' datasets: the checked-in files are what the generator writes, and every answer is right."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rlvr"


@pytest.mark.parametrize(
    ("name", "flags"),
    [("arith", []), ("sub", ["--op", "-", "--layout", "trl", "--name", "sub"])],
)
def test_the_checked_in_files_are_the_generators_byte_for_byte(tmp_path, name, flags):
    subprocess.run(
        [sys.executable, str(EXAMPLES / "generate_arith.py"), *flags, "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for split in ("train", "test"):
        assert (tmp_path / f"{name}_{split}.jsonl").read_bytes() == (EXAMPLES / f"{name}_{split}.jsonl").read_bytes()


def _rows(name: str, split: str) -> list[dict]:
    return [json.loads(line) for line in (EXAMPLES / f"{name}_{split}.jsonl").read_text().splitlines()]


def test_answers_are_right_and_train_and_test_are_disjoint():
    for row in _rows("sub", "train") + _rows("sub", "test"):
        a, b = row["prompt"].removesuffix("=").split("-")
        assert set(row) == {"prompt", "answer"} and row["answer"] == str(int(a) - int(b))  # TRL's layout
    for row in _rows("arith", "test"):
        a, b = row["prompt"].removesuffix("=").split("+")
        assert row["reward_model"]["ground_truth"] == str(int(a) + int(b))  # verl's layout
    for name in ("arith", "sub"):
        train = {r["prompt"] for r in _rows(name, "train")}
        test = {r["prompt"] for r in _rows(name, "test")}
        assert len(train) == 650 and len(test) == 160 and not train & test
