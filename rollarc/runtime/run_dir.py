"""One run-directory format for every kind of run (LLM and t2i): how it is created, recorded, closed and resumed.

Both ``rollarc train`` paths (:mod:`rollarc.runtime.entry`, :mod:`rollarc.diffusion.entry`) make their run
directory here, so both write the same layout::

    RUN_DIR/
      config.yaml            the resolved config (never rewritten; a resume writes config.resume-N.yaml)
      fingerprint.json       the SHA-256 of config.yaml's config (a resume checks it)
      config_history.jsonl   one line per resume: the checkpoint it started from and the keys it changed
      metrics.jsonl          one line per training step
      summary.json           when the run ends, or is stopped: at least :data:`SUMMARY_KEYS`
      checkpoints/step_N/    state.json (with the step's ``version``) and the kind's weights
      report.md              and its plots

The kind's own schema lives in :mod:`rollarc.report.run_dir`; this module holds the steps around it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from rollarc.config.io import ConfigError, dump_yaml, validate
from rollarc.models.checkpoint import check_state_files, remove_partial_directories
from rollarc.models.checkpoint_digest import MANIFEST, DamagedCheckpoint, verify_manifest
from rollarc.models.checkpoint_retention import STATE, complete_checkpoints
from rollarc.report.config_fingerprint import check_resume, fingerprint
from rollarc.report.disk_full_guard import run_record
from rollarc.report.durable import append_line_durably, write_text_durably
from rollarc.report.run_dir import (
    CHECKPOINTS,
    CONFIG,
    METRICS,
    SUMMARY,
    Summary,
    checkpoint_name,
    from_dict,
    write_json,
)
from rollarc.runtime.stop_signals import RunStopped

FINGERPRINT = "fingerprint.json"
HISTORY = "config_history.jsonl"
# Keys every summary.json has, whichever kind of run wrote it and however it ended.
SUMMARY_KEYS = ("name", "status", "stop_reason", "steps", "wall_s", "total_wall_s", "evals", "resumes")
# Files every finished run directory has, whichever kind of run wrote it.
LAYOUT = (CONFIG, FINGERPRINT, METRICS, SUMMARY, "report.md")


def config_dict(cfg: BaseModel) -> dict[str, Any]:
    """A config as plain JSON data, the form its fingerprint and the resume check compare."""
    return cfg.model_dump(mode="json", by_alias=True)


def new_run_dir(parent: str | Path, name: str) -> Path:
    """``PARENT/NAME-YYYYmmdd-HHMMSS`` (with ``-N`` when that exists), created."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir, suffix = Path(parent) / f"{name}-{stamp}", 1
    while run_dir.exists():
        run_dir, suffix = Path(parent) / f"{name}-{stamp}-{suffix}", suffix + 1
    run_dir.mkdir(parents=True)
    return run_dir


def record_new_run(run_dir: Path, cfg: BaseModel) -> None:
    """``config.yaml`` and ``fingerprint.json`` of a run that starts now."""
    write_text_durably(run_dir / CONFIG, dump_yaml(cfg))
    write_text_durably(
        run_dir / FINGERPRINT, json.dumps({"config_sha256": fingerprint(config_dict(cfg))}, indent=1) + "\n"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The run's last complete checkpoint (``checkpoints/step_N`` with a ``state.json``), or None.

    Ordered by the step number, not the name: t2i runs before this format named them with 5 digits.
    """
    found = complete_checkpoints(run_dir / CHECKPOINTS)
    return found[-1] if found else None


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: its directory, last checkpoint and that checkpoint's controller state."""

    run_dir: Path
    checkpoint: Path
    state: dict[str, Any]
    resumes: int  # this resume's number N (1 for the first)
    skipped: tuple[str, ...] = ()  # newer checkpoints passed over as damaged, each with why


def intact_checkpoint(run_dir: Path, say: Callable[[str], None]) -> tuple[Path, dict[str, Any], list[str]]:
    """The newest complete checkpoint whose files match its manifest, its ``state.json``, and the newer ones
    passed over as damaged (``say`` tells each in one line). A checkpoint without a manifest (an older
    rollarc's) is loaded unverified. A state file holding pickled objects is refused outright (UnsafeCheckpoint).
    """
    checkpoints = complete_checkpoints(run_dir / CHECKPOINTS)
    if not checkpoints:
        raise ConfigError(f"resume={run_dir}: no checkpoint found under {run_dir / CHECKPOINTS}")
    skipped: list[str] = []
    for checkpoint in reversed(checkpoints):
        try:
            verified = verify_manifest(checkpoint)
            check_state_files(checkpoint)
            state = json.loads((checkpoint / STATE).read_text())
        except DamagedCheckpoint as err:
            skipped.append(f"{checkpoint.name}: {err}")
            continue
        except (json.JSONDecodeError, UnicodeDecodeError):
            skipped.append(f"{checkpoint.name}: {checkpoint / STATE} is not valid JSON")
            continue
        for note in skipped:
            say(f"rollarc: checkpoint {note}; resuming from the previous one, {checkpoint.name}")
        if not verified:
            say(f"rollarc: {checkpoint.name} has no {MANIFEST} (an older rollarc wrote it): loaded unverified")
        return checkpoint, state, skipped
    raise ConfigError(f"resume={run_dir}: no intact checkpoint under {run_dir / CHECKPOINTS}: {skipped[0]}")


def _resume_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("config.resume-*.yaml"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))


def run_config(run_dir: Path, model: type[BaseModel]) -> tuple[dict[str, Any], Path]:
    """The run's latest resolved config (as this rollarc's ``model`` resolves it) and the file it came from."""
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
    return config_dict(validate(model, data, source=str(path))), path


def resume_point(
    cfg: Any, check: Callable[[Path, Path], None] | None = None, say: Callable[[str], None] | None = None
) -> ResumePoint:
    """Check ``cfg`` (a config with ``resume`` set) against the run it resumes, then record the resume.

    ``check(run_dir, checkpoint)`` is the kind's own check, run before anything is written. A one-line
    ConfigError when the resume may not go on: no such directory, an unsafe config change, no intact checkpoint.
    A damaged latest checkpoint is passed over for the previous intact one; ``say`` (stderr by default) and
    ``config_history.jsonl`` (``skipped_damaged``) tell so.
    """
    run_dir = Path(cfg.resume)
    if not run_dir.is_dir():
        raise ConfigError(f"resume={run_dir}: no such directory")
    remove_partial_directories(run_dir / CHECKPOINTS)  # left by a crash in the middle of a save
    old, _ = run_config(run_dir, type(cfg))
    new = config_dict(cfg)
    changes = check_resume(old, new, str(run_dir))
    checkpoint, state, skipped = intact_checkpoint(run_dir, say or (lambda line: print(line, file=sys.stderr)))
    if check is not None:
        check(run_dir, checkpoint)
    number = len(_resume_files(run_dir)) + 1
    write_text_durably(run_dir / f"config.resume-{number}.yaml", dump_yaml(cfg))
    entry = {
        "resume": number,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "checkpoint": checkpoint.name,
        "config_sha256": fingerprint(new),
        "changed": {key: {"from": a, "to": b} for key, (a, b) in changes.items() if key != "resume"},
    }
    if skipped:
        entry["skipped_damaged"] = skipped
    append_line_durably(run_dir / HISTORY, json.dumps(entry))
    return ResumePoint(run_dir=run_dir, checkpoint=checkpoint, state=state, resumes=number, skipped=tuple(skipped))


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json``, through its schema (leniently: a mistyped value is kept, not lost), replaced atomically;
    a full disk is :class:`~rollarc.report.disk_full.DiskFull`, one line."""
    with run_record(run_dir / SUMMARY):
        write_json(run_dir / SUMMARY, from_dict(Summary, summary, str(run_dir / SUMMARY), lenient=True))


def finished(summary: dict[str, Any], start: float, resumes: int) -> dict[str, Any]:
    """A summary with what the entry adds at the end: this process's wall time and the resume count."""
    return {
        "status": "completed",
        "stop_reason": None,
        **summary,
        "total_wall_s": time.time() - start,
        "resumes": resumes,
    }


def partial_summary(counts: dict[str, Any], name: str, reason: str, start: float, resumes: int) -> dict[str, Any]:
    """``summary.json`` of a run that stopped before its last step: the counts so far and why.

    ``counts`` is what the controller knew, or, when it stopped while starting, ``{"steps": N}``; the run
    clock (``wall_s``) is then this process's time, and there were no evaluations.
    """
    elapsed = time.time() - start
    return {
        "wall_s": elapsed,
        "evals": [],
        **counts,
        "name": name,
        "status": "stopped",
        "stop_reason": reason,
        "total_wall_s": elapsed,
        "resumes": resumes,
    }


def layout_problems(run_dir: Path) -> list[str]:
    """What a finished run directory lacks of the shared layout (files, summary keys, checkpoint state); [] if none."""
    problems = [f"no {name}" for name in LAYOUT if not (run_dir / name).is_file()]
    if (run_dir / SUMMARY).is_file():
        summary = json.loads((run_dir / SUMMARY).read_text())
        problems += [f"{SUMMARY} has no {key!r}" for key in SUMMARY_KEYS if key not in summary]
    checkpoints = sorted((run_dir / CHECKPOINTS).iterdir()) if (run_dir / CHECKPOINTS).is_dir() else []
    for path in checkpoints:
        number = path.name.removeprefix("step_")
        if not (path.name.startswith("step_") and number.isdigit() and path.name == checkpoint_name(int(number))):
            problems.append(f"{CHECKPOINTS}/{path.name} is not named {checkpoint_name(0)} and so on")
        elif not (path / STATE).is_file():
            problems.append(f"{CHECKPOINTS}/{path.name} has no {STATE}")
    return problems


def stop_summary(run_dir: Path, stopped: RunStopped, summary: dict[str, Any]) -> int:
    """After a stop signal: remove half-written checkpoints, record why the run stopped, say how to resume.

    Returns the shell's exit code for the signal. The resume command names the run's own ``config.yaml``:
    it holds the overrides the run was started with.
    """
    removed = remove_partial_directories(run_dir / CHECKPOINTS)
    checkpoint = latest_checkpoint(run_dir)
    saved = json.loads((checkpoint / STATE).read_text())["version"] if checkpoint else None
    summary = {
        **summary,
        "last_checkpoint": str(checkpoint) if checkpoint else None,
        "last_checkpoint_step": saved,
        "removed_partial_checkpoints": [path.name for path in removed],
    }
    write_summary(run_dir, summary)
    if checkpoint is None:
        print(f"rollarc: stopped by {stopped.name}; no checkpoint was written yet ({run_dir})", file=sys.stderr)
    else:
        print(
            f"rollarc: stopped by {stopped.name}; saved step {saved} in {checkpoint}; "
            f"resume with: rollarc train {run_dir / CONFIG} resume={run_dir}",
            file=sys.stderr,
        )
    return stopped.exit_code
