"""Driver-side torch work (SFT, its held-out score, `rollarc eval`) runs on the thread count its config pins.

Each Ray actor pins its threads from the config; the driver must too, or SFT on a machine with a busy core
oversubscribes it (the quickstart's 100 SFT steps took 515 s instead of about 30 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rollarc.config import load_train_config
from rollarc.runtime import entry
from rollarc.train import sft_entry

TASK = {
    "name": "fl",
    "env": {"id": "frozen_lake", "kwargs": {"size": 4, "max_steps": 6, "is_slippery": False}},
    "agent": {"max_turns": 6, "max_tokens_per_turn": 1, "history": "last_k", "context_limit": 128},
}


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # so the count under test (2) can only come from the config
    yield
    torch.set_num_threads(before)


def spy(calls: list[dict[str, Any]], fn):
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        engine_cfg = kwargs.get("engine_cfg", args[6] if len(args) > 6 else None)
        calls.append({"torch": torch.get_num_threads(), "engine": getattr(engine_cfg, "num_threads", None)})
        return fn(*args, **kwargs)

    return wrapped


def test_sft_and_its_evaluation_run_on_sft_threads(tmp_path: Path, monkeypatch, restore_threads):
    config = tmp_path / "sft.yaml"
    sft = {"checkpoint": str(tmp_path / "sft"), "episodes": 4, "steps": 2, "batch_size": 4, "eval_episodes": 2}
    model = {"preset": "nano", "max_position_embeddings": 128}
    config.write_text(yaml.safe_dump({"tasks": [TASK], "model": model, "sft": sft}))
    cfg = load_train_config(config, ["sft.threads=2"])
    train_calls: list[dict[str, Any]] = []
    eval_calls: list[dict[str, Any]] = []
    real_train = sft_entry.train_sft

    def train_spy(*args: Any, **kwargs: Any) -> Any:
        train_calls.append({"torch": torch.get_num_threads()})
        return real_train(*args, **kwargs)

    monkeypatch.setattr(sft_entry, "train_sft", train_spy)
    monkeypatch.setattr(sft_entry, "evaluate_local", spy(eval_calls, sft_entry.evaluate_local))
    sft_entry.run_sft(cfg, log=lambda _m: None)
    assert train_calls == [{"torch": 2}]
    assert eval_calls == [{"torch": 2, "engine": 2}]


def test_rollarc_eval_runs_on_eval_threads(tmp_path: Path, nano_policy_dir: Path, monkeypatch, restore_threads):
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({"tasks": [TASK], "model": {"path": str(nano_policy_dir)}}))
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(entry, "evaluate_local", spy(calls, entry.evaluate_local))
    assert entry.eval_main(str(config), ["train.eval_threads=2"], episodes=2) == 0
    assert calls == [{"torch": 2, "engine": 2}]
