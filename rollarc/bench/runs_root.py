"""A ``--runs ROOT`` folder that a benchmark can fill over several invocations.

A training benchmark of 3 seeds × 3 modes × 100 steps (``rollarc bench async``) takes longer than one
sitting on a 2-core machine. Each run is timed on its own (its RL wall time is in its own ``summary.json``),
so a finished run's figures do not depend on what ran before it: a later invocation with the same ``ROOT``
reuses every finished run and trains only the missing ones. A run interrupted half-way has no
completed ``summary.json``; its folder is discarded and the run trains again from the start, because a wall time
stitched across two processes would not be a wall time.

What keeps the pieces comparable is recorded in ``ROOT/bench_meta.json`` and checked on every invocation:
the code's commit and the overrides every run gets (config, steps, warm start). A different commit or
different overrides is refused with a one-line error: that ``ROOT`` belongs to another measurement. Each
invocation appends a session with the runs it trained and its machine load, and the published load
(``combined_load``) is over all sessions, weighted by their wall time, so a noisy sitting cannot hide.

A sitting may end with the machine it ran on (a fresh checkout next time). ``export_records`` copies what a
later invocation reads of a root (``bench_meta.json``, each finished run's small files, the warm start inside
the root) to a folder that can be committed; copied back to the same ``ROOT`` path, and run from a checkout
of the recorded commit, the runs are reused as if they had never left. Left out: ``timeline.jsonl`` (tens of
MB per run, read by no figure of this benchmark), the tensorboard folder and checkpoints.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from rollarc.bench.machine_load import QUIET_OTHER_SHARE

META_FILE = "bench_meta.json"
# Run files a later invocation does not read and that are too large to commit.
NOT_EXPORTED = frozenset({"timeline.jsonl"})


class RootMismatch(ValueError):
    """``ROOT`` was filled by another commit or with other overrides."""


def open_root(root: Path, commit: str | None, overrides: list[str]) -> dict[str, Any]:
    """The record of ``root`` with a new session appended; refuses a root recorded at another commit or
    with other overrides. A root without a record (new, or from before records) starts one."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / META_FILE
    if path.is_file():
        meta = json.loads(path.read_text())
        if meta.get("commit") != commit:
            raise RootMismatch(
                f"{root} holds runs of commit {meta.get('commit')}, this is {commit}: use another --runs folder"
            )
        if meta.get("overrides") is not None and meta["overrides"] != overrides:
            raise RootMismatch(
                f"{root} holds runs made with other overrides ({' '.join(meta['overrides'])}): use another --runs folder"
            )
    else:
        meta = {"commit": commit}
    meta["overrides"] = overrides
    meta.setdefault("sessions", []).append({"trained": [], "machine_load": None})
    return meta


def record(root: Path, meta: dict[str, Any], trained: str | None, load: dict[str, Any] | None) -> None:
    """Note a run this session trained (``trained``, if any) and the session's load so far; written atomically."""
    session = meta["sessions"][-1]
    if trained is not None:
        session["trained"].append(trained)
    session["machine_load"] = load
    meta["machine_load"] = combined_load([s["machine_load"] for s in meta["sessions"]])
    tmp = root / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(root / META_FILE)


def combined_load(loads: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The machine load over several sessions: CPU shares weighted by each session's wall time."""
    known = [load for load in loads if load is not None and load.get("wall_s")]
    wall = sum(float(load["wall_s"]) for load in known)
    if wall <= 0:
        return None
    other = sum(float(load["other_cpu_share"]) * float(load["wall_s"]) for load in known) / wall
    own = sum(float(load["own_cpu_share"]) * float(load["wall_s"]) for load in known) / wall
    return {
        "other_cpu_share": round(other, 3),
        "own_cpu_share": round(own, 3),
        "wall_s": round(wall, 1),
        "quiet": other < QUIET_OTHER_SHARE,
        "sessions": len(known),
    }


def finished(home: Path) -> bool:
    """Whether ``home`` holds one run directory whose ``summary.json`` (replaced atomically at the end) says
    it completed; a run stopped by a signal or an error also writes one, with another status."""
    if not home.is_dir():
        return False
    dirs = [p for p in home.iterdir() if p.is_dir()]
    if len(dirs) != 1 or not (dirs[0] / "summary.json").is_file():
        return False
    return json.loads((dirs[0] / "summary.json").read_text()).get("status") == "completed"


def discard_unfinished(home: Path) -> bool:
    """Remove ``home`` when it holds no finished run (an interrupted one); returns whether it did."""
    if home.exists() and not finished(home):
        shutil.rmtree(home)
        return True
    return False


def export_records(root: Path, dest: Path) -> list[str]:
    """Copy ``root``'s record, its finished runs' top-level files (less ``NOT_EXPORTED``) and a warm start kept
    under ``root`` (``sft.checkpoint=`` among the overrides) to ``dest``; returns the run labels copied.
    Unfinished runs are skipped: a later invocation would train them again anyway."""
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise RootMismatch(f"{root}: no {META_FILE} there (only a measured run writes one)")
    if dest.resolve() == root.resolve():
        raise RootMismatch(f"{dest}: exporting a root onto itself")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(meta_path, dest / META_FILE)
    labels = []
    for home in sorted(p for p in root.iterdir() if p.is_dir()):
        if not finished(home):
            continue
        (run_dir,) = [p for p in home.iterdir() if p.is_dir()]
        out = dest / home.name / run_dir.name
        out.mkdir(parents=True, exist_ok=True)
        for f in run_dir.iterdir():
            if f.is_file() and f.name not in NOT_EXPORTED:
                shutil.copy2(f, out / f.name)
        labels.append(home.name)
    warm = warm_start_in(root, json.loads(meta_path.read_text()).get("overrides") or [])
    if warm is not None:
        shutil.copytree(warm, dest / warm.relative_to(root.resolve()), dirs_exist_ok=True)
    return labels


def warm_start_in(root: Path, overrides: list[str]) -> Path | None:
    """The ``sft.checkpoint=`` folder of ``overrides`` when it lies inside ``root`` (as the docs advise)."""
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "sft.checkpoint" and value:
            path = Path(value).resolve()
            if path.is_dir() and path.is_relative_to(root.resolve()):
                return path
    return None


def git_ignored(path: Path) -> bool:
    """Whether git would leave ``path`` out of a commit (a ``runs/`` pattern matches any folder of that name,
    which once kept an export out of the repository unnoticed); ``False`` outside a checkout."""
    folder = path if path.is_dir() else path.parent
    try:
        done = subprocess.run(["git", "-C", str(folder), "check-ignore", "-q", str(path.resolve())], check=False)
    except FileNotFoundError:  # no git on this machine
        return False
    return done.returncode == 0
