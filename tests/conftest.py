"""Shared fixtures: tiny policies built on the fly (nothing is downloaded), a local Ray cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def new_policy_dir(tmp_path_factory: pytest.TempPathFactory, preset: str, max_position_embeddings: int) -> Path:
    """An HF-format directory holding a randomly initialised ``preset`` policy and rollarc's tokenizer."""
    from rollarc.models import new_policy, save_policy

    model, tokenizer = new_policy(preset, max_position_embeddings=max_position_embeddings, seed=0)
    path = tmp_path_factory.mktemp("policy") / preset
    save_policy(model, tokenizer, path)
    return path


@pytest.fixture(scope="session")
def nano_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_policy_dir(tmp_path_factory, "nano", 256)


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset (head_dim 32): vLLM's CPU attention needs head_dim 32 or more, and nano has 16."""
    return new_policy_dir(tmp_path_factory, "tiny", 512)


# The runtime tests load scripted envs by entry point ("runtime_plugins:ScriptedEnv"). Putting the folder on
# PYTHONPATH before Ray starts makes it importable in every Ray worker too.
PLUGINS = str(Path(__file__).parent / "plugins")
if PLUGINS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [PLUGINS, os.environ.get("PYTHONPATH", "")] if p)
import sys  # noqa: E402

if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)


# The suite's size, counted where it runs (docs/development.md, "The suite's budget"): every `assert` in a test
# module or conftest that held (pytest's assertion-pass hook, enabled in pyproject.toml), printed at the end and,
# with ROLLARC_ASSERTION_COUNTS set to a path, written there per test as JSON (to compare a suite before and after
# a change that merges or moves tests).
ASSERTIONS: dict[str, int] = {}


def pytest_assertion_pass(item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
    ASSERTIONS[item.nodeid] = ASSERTIONS.get(item.nodeid, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(ASSERTIONS.values())
    terminalreporter.write_line(f"assertions held: {total} in {len(ASSERTIONS)} tests")
    path = os.environ.get("ROLLARC_ASSERTION_COUNTS")
    if path:
        import json

        Path(path).write_text(json.dumps(dict(sorted(ASSERTIONS.items())), indent=0))
