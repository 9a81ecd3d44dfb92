"""What a benchmark run trained, against what it admitted: success and length, per run and per mode.

A faster asynchronous mode is only worth as much as what it trains: if its batches hold shorter or less
successful trajectories than the run samples, it learns less per step. ``rollarc bench async`` reports, per mode,
the median over seeds of two numbers, computed here from each run's own files so that they can also be computed
after the fact for any run directory:

- ``trained_success_mean``: success over every trained trajectory of the run (``success`` weighted by
  ``trajectories`` per step of ``metrics.jsonl``);
- ``trained_vs_admitted_length_ratio``: generated tokens per trained trajectory over generated tokens per admitted
  trajectory that finished (trained or not). 1 means the batches are as long as what the run samples.

The admitted length comes from ``metrics.jsonl`` (``admitted_tokens`` weighted by ``admitted_trajectories``) when
the run records it; a run from before those keys falls back on ``task_profiles.json``, whose per-task exact means
cover the same population (every trajectory that finished well). ``admitted_source`` says which was used.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SEED_SUFFIX = re.compile(r"_s\d+$")  # bench async names a mode's extra seeds LABEL_s1, LABEL_s2, ...
KEYS = ("trained_success_mean", "trained_vs_admitted_length_ratio")


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def composition_from_rows(rows: Sequence[dict[str, Any]], profiles: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run's trained success and trained-vs-admitted length ratio from its ``metrics.jsonl`` rows (and, for a run
    without ``admitted_*`` keys, its ``task_profiles.json`` as parsed JSON)."""
    trained = sum(r.get("trajectories") or 0 for r in rows)
    success = _ratio(sum((r.get("success") or 0.0) * (r.get("trajectories") or 0) for r in rows), trained)
    trained_tokens = _ratio(sum(r.get("generated_tokens") or 0 for r in rows), trained)
    admitted_n = sum(r.get("admitted_trajectories") or 0 for r in rows if r.get("admitted_tokens") is not None)
    if admitted_n > 0:
        tokens = sum(
            r["admitted_tokens"] * r["admitted_trajectories"] for r in rows if r.get("admitted_tokens") is not None
        )
        admitted_tokens, source = tokens / admitted_n, "metrics"
    elif profiles is not None:
        tasks = profiles.get("tasks", {}).values()
        # per task: turns.n trajectories finished well, new_tokens_per_turn.n turns of mean new_tokens_per_turn.mean
        total = sum(t["new_tokens_per_turn"]["mean"] * t["new_tokens_per_turn"]["n"] for t in tasks if t["turns"]["n"])
        admitted_tokens, source = _ratio(total, sum(t["turns"]["n"] for t in tasks)), "task_profiles"
    else:
        admitted_tokens, source = None, None
    return {
        "trained_trajectories": trained,
        "trained_success_mean": success,
        "trained_tokens": trained_tokens,
        "admitted_tokens": admitted_tokens,
        "trained_vs_admitted_length_ratio": (
            None if trained_tokens is None or admitted_tokens is None else _ratio(trained_tokens, admitted_tokens)
        ),
        "admitted_source": source,
    }


def trained_composition(run_dir: str | Path) -> dict[str, Any]:
    """``composition_from_rows`` of one run directory (the one holding ``metrics.jsonl``)."""
    run_dir = Path(run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    profiles_path = run_dir / "task_profiles.json"
    profiles = json.loads(profiles_path.read_text()) if profiles_path.is_file() else None
    return composition_from_rows(rows, profiles)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def composition_by_mode(runs: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """``{key: {mode: median over that mode's runs}}`` for both ``KEYS``, from (mode, composition) pairs."""
    per_mode: dict[str, list[dict[str, Any]]] = {}
    for mode, composition in runs:
        per_mode.setdefault(mode, []).append(composition)
    return {key: {mode: _median([c[key] for c in cs]) for mode, cs in per_mode.items()} for key in KEYS}


def composition_of_runs(runs: Iterable[tuple[str, str | Path]]) -> dict[str, dict[str, float | None]]:
    """``composition_by_mode`` over (mode, run directory) pairs."""
    return composition_by_mode((mode, trained_composition(run_dir)) for mode, run_dir in runs)


def bench_run_dirs(root: str | Path, modes: Sequence[str] | None = None) -> list[tuple[str, Path]]:
    """(mode, run directory) of every run under a ``rollarc bench async --runs ROOT``: ``ROOT/LABEL/NAME-TIME/``,
    where LABEL is the mode for its first seed and ``MODE_sN`` for the others. Only ``modes`` when given, and only
    finished runs (with ``summary.json``: a run still going would count part of its steps)."""
    out = []
    for home in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        mode = SEED_SUFFIX.sub("", home.name)
        if modes is not None and mode not in modes:
            continue
        out += [(mode, run) for run in sorted(home.iterdir()) if (run / "summary.json").is_file()]
    return out
