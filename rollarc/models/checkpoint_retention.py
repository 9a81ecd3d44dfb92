"""Which checkpoints of a run are complete, and which old ones go (``train.keep_last_checkpoints``).

A complete checkpoint is ``checkpoints/step_N`` with its ``state.json`` (written inside the atomic directory, so
it exists only once everything else does). Retention deletes the oldest complete checkpoints beyond the last N
after a new one was written: never the one just written, never one newer than it (a stale checkpoint of the
run's previous life, about to be overwritten), so at least one complete checkpoint always remains.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

STATE = "state.json"
_PRUNED = ".pruned-"  # a checkpoint being deleted: renamed first, so a crash mid-delete leaves no partial step_N


def step_of(path: Path) -> int | None:
    """N of ``step_N`` (5 or 6 digits: older t2i runs used 5), else None."""
    number = path.name.removeprefix("step_")
    return int(number) if path.name.startswith("step_") and number.isdigit() else None


def complete_checkpoints(checkpoints: Path) -> list[Path]:
    """The complete ``step_N`` directories under ``checkpoints``, oldest (smallest N) first."""
    if not checkpoints.is_dir():
        return []
    found = [p for p in checkpoints.iterdir() if step_of(p) is not None and (p / STATE).is_file()]
    return sorted(found, key=lambda p: step_of(p) or 0)


def prune_checkpoints(checkpoints: Path, keep: int, written: Path) -> list[Path]:
    """After ``written`` was saved: delete the complete checkpoints older than it beyond the last ``keep``
    (``written`` counted). ``keep`` 0 keeps every one. Returns what was deleted, oldest first."""
    for leftover in checkpoints.glob(f".*{_PRUNED}*"):  # a delete a crash interrupted
        shutil.rmtree(leftover, ignore_errors=True)
    complete = complete_checkpoints(checkpoints)
    step = step_of(written)
    if keep <= 0 or step is None or written not in complete:
        return []
    older = [p for p in complete if (step_of(p) or 0) < step]
    doomed = older[: max(0, len(older) - (keep - 1))]
    for path in doomed:
        aside = path.with_name(f".{path.name}{_PRUNED}{uuid.uuid4().hex[:8]}")
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)
    return doomed
