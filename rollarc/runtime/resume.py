"""Starting and resuming a run directory: its config record, its fingerprint and the resume check.

A new run writes ``config.yaml`` (the resolved config) and ``fingerprint.json`` (its SHA-256). A resume
compares its config with the run's latest one (``config.yaml``, or the last ``config.resume-N.yaml``) and
refuses any change outside :data:`~rollarc.report.config_fingerprint.SAFE_TO_CHANGE`. It never overwrites
``config.yaml``: a resume writes its own resolved config to ``config.resume-N.yaml`` and appends a line to
``config_history.jsonl`` (N, the checkpoint it started from, its fingerprint and the keys it changed).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollarc.config import Config
from rollarc.configio import ConfigError, dump_yaml, validate
from rollarc.models.checkpoint import REFERENCE_FILE
from rollarc.report.config_fingerprint import check_resume, fingerprint
from rollarc.report.run_dir import CONFIG

FINGERPRINT = "fingerprint.json"
HISTORY = "config_history.jsonl"


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: its directory, last checkpoint and that checkpoint's controller state."""

    run_dir: Path
    checkpoint: Path
    state: dict[str, Any]
    resumes: int  # this resume's number N (1 for the first)


def config_dict(cfg: Config) -> dict[str, Any]:
    return cfg.model_dump(mode="json", by_alias=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    candidates = sorted(p for p in (run_dir / "checkpoints").glob("step_*") if (p / "state.json").is_file())
    return candidates[-1] if candidates else None


def record_new_run(run_dir: Path, cfg: Config) -> None:
    """``config.yaml`` and ``fingerprint.json`` of a run that starts now."""
    (run_dir / CONFIG).write_text(dump_yaml(cfg))
    (run_dir / FINGERPRINT).write_text(json.dumps({"config_sha256": fingerprint(config_dict(cfg))}, indent=1) + "\n")


def _resume_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("config.resume-*.yaml"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))


def run_config(run_dir: Path) -> tuple[dict[str, Any], Path]:
    """The run's latest resolved config (as this rollarc's ``Config`` resolves it) and the file it came from."""
    path = (_resume_files(run_dir) or [run_dir / CONFIG])[-1]
    if not path.is_file():
        raise ConfigError(f"resume={run_dir}: {path.name} is missing, so the run's config cannot be checked")
    data = yaml.safe_load(path.read_text()) or {}
    stored = run_dir / FINGERPRINT
    if path.name == CONFIG and stored.is_file():
        expected = json.loads(stored.read_text()).get("config_sha256")
        if fingerprint(data) != expected:
            raise ConfigError(
                f"resume={run_dir}: {CONFIG} was edited after the run started (its SHA-256 is not the one in "
                f"{FINGERPRINT}); restore it, or start a new run"
            )
    # Validated again so that a field added to rollarc since then has its default on both sides of the diff.
    return config_dict(validate(Config, data, source=str(path))), path


def prepare_resume(cfg: Config) -> ResumePoint:
    """Check ``cfg`` against the run it resumes and record the resume; a one-line ConfigError if it may not."""
    assert cfg.resume is not None
    run_dir = Path(cfg.resume)
    if not run_dir.is_dir():
        raise ConfigError(f"resume={run_dir}: no such directory")
    old, _ = run_config(run_dir)
    new = config_dict(cfg)
    changes = check_resume(old, new, str(run_dir))
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ConfigError(f"resume={run_dir}: no checkpoint found under {run_dir / 'checkpoints'}")
    # with model.lora the reference is the checkpoint's own base (policy/), adapters disabled: no file for it
    if cfg.algo.kl_coef > 0 and cfg.model.lora is None and not (checkpoint / REFERENCE_FILE).is_file():
        raise ConfigError(
            f"resume={run_dir}: {checkpoint.name} holds no {REFERENCE_FILE} (it was written by an older rollarc), "
            "so algo.kl_coef > 0 would regularise towards the resumed weights instead of the original reference"
        )
    state = json.loads((checkpoint / "state.json").read_text())
    number = len(_resume_files(run_dir)) + 1
    (run_dir / f"config.resume-{number}.yaml").write_text(dump_yaml(cfg))
    entry = {
        "resume": number,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "checkpoint": checkpoint.name,
        "config_sha256": fingerprint(new),
        "changed": {key: {"from": a, "to": b} for key, (a, b) in changes.items() if key != "resume"},
    }
    with (run_dir / HISTORY).open("a") as fh:
        fh.write(json.dumps(entry) + "\n")
    return ResumePoint(run_dir=run_dir, checkpoint=checkpoint, state=state, resumes=number)
