"""The resume check on a run directory (no Ray): fingerprint recorded, safe changes recorded, others refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.config import Config
from rollarc.config.io import ConfigError, validate
from rollarc.runtime.resume import FINGERPRINT, HISTORY, prepare_resume, record_new_run


def cfg(run: Path | None = None, **train: Any) -> Config:
    data: dict[str, Any] = {
        "tasks": [{"name": "s", "env": {"id": "sokoban"}}],
        "model": {"path": "policy"},
        "train": {"steps": 2, **train},
        "resume": None if run is None else str(run),
    }
    return validate(Config, data)


def new_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "checkpoints" / "step_000002" / "state.json").write_text(json.dumps({"version": 2}))
    record_new_run(run, cfg())
    return run


def test_safe_resumes_are_numbered_and_never_rewrite_config_yaml(tmp_path):
    run = new_run(tmp_path)
    original = (run / "config.yaml").read_text()
    assert len(json.loads((run / FINGERPRINT).read_text())["config_sha256"]) == 64
    point = prepare_resume(cfg(run, steps=3, eval_every=1))
    assert (point.resumes, point.checkpoint.name, point.state) == (1, "step_000002", {"version": 2})
    point = prepare_resume(cfg(run, steps=4, eval_every=1))  # compared with resume 1's config, not the original
    assert point.resumes == 2
    history = [json.loads(line) for line in (run / HISTORY).read_text().splitlines()]
    assert [h["changed"] for h in history] == [
        {"train.steps": {"from": 2, "to": 3}, "train.eval_every": {"from": 10, "to": 1}},
        {"train.steps": {"from": 3, "to": 4}},
    ]
    assert (run / "config.yaml").read_text() == original
    assert "steps: 4" in (run / "config.resume-2.yaml").read_text()


def test_an_unsafe_change_is_refused_and_nothing_is_written(tmp_path):
    run = new_run(tmp_path)
    with pytest.raises(ConfigError, match=r"differs from the run's in train\.lr \(0\.0003 -> 0\.1\);"):
        prepare_resume(cfg(run, steps=3, lr=0.1))
    assert not (run / HISTORY).exists() and not list(run.glob("config.resume-*.yaml"))


def test_an_edited_config_yaml_is_refused(tmp_path):
    run = new_run(tmp_path)
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("steps: 2", "steps: 5"))
    with pytest.raises(ConfigError, match=r"config\.yaml was edited after the run started"):
        prepare_resume(cfg(run))


def test_kl_training_needs_the_reference_in_the_checkpoint(tmp_path):
    run = new_run(tmp_path)
    data = cfg(run).model_dump(by_alias=True)
    data["algo"]["kl_coef"] = 0.1
    record_new_run(run, validate(Config, {**data, "resume": None}))
    with pytest.raises(ConfigError, match=r"holds no reference\.safetensors"):
        prepare_resume(validate(Config, data))
