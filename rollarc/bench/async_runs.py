"""The runs of ``rollarc bench async``: train one mode into its own folder of a ``--runs`` root (or reuse the
finished run there), read a finished run's figures back, and do so for every mode and seed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollarc.bench import runs_root
from rollarc.bench.async_modes import curve_modes, modes
from rollarc.bench.harness import record_load
from rollarc.bench.time_to_target import eval_pause_gain, eval_steps, pauses, success_curve
from rollarc.config import load_train_config
from rollarc.runtime.entry import run_training

# Written into a ``--runs`` root by a measured run: its commit, overrides and machine load (runs_root.py).
META_FILE = runs_root.META_FILE


def run_mode(
    config_path: str, overrides: list[str], label: str, runs: Path, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train one run into ``runs/label`` and read its figures; a run already finished there (an earlier
    invocation with the same ``--runs`` root, see runs_root.py) is read, not trained again."""
    home = runs / label  # one folder per run: labels may prefix each other (sync, sync_s1)
    if runs_root.finished(home):
        print(f"   reusing the finished run in {home}", flush=True)
        return read_run(home)
    if runs_root.discard_unfinished(home):
        print(f"   discarded the unfinished run in {home}: it trains again from the start", flush=True)
    cfg = load_train_config(config_path, [*overrides, f"name={label}", f"run.dir={home}", "run.progress=false"])
    code = run_training(cfg)
    if code != 0:
        raise RuntimeError(f"mode {label} failed with exit code {code}")
    if meta is not None:
        record_load(runs, meta, label)
    return read_run(home)


def read_run(home: Path) -> dict[str, Any]:
    """One finished run's figures, from its folder ``home`` (holding the run directory) alone."""
    (run_dir,) = [p for p in home.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # periodic held-out evaluations pause the controller (live: after their step; deferred: where they are
    # scored, at a checkpoint): they are not training time
    eval_s = sum(pauses(summary).values())
    rl_wall_s = summary["rl_wall_s"] - eval_s
    return {
        "rl_wall_s": rl_wall_s,
        "trajectories_per_s": summary["trajectories_trained"] / max(rl_wall_s, 1e-9),
        "success": summary["heldout_success_after_rl"],
        "success_before": summary["heldout_success_before_rl"],
        "bubble": summary.get("bubble_fraction", {}),
        "dropped_stale_groups": summary["dropped_stale_groups"],
        "failed_trajectories": summary["failed_trajectories"],
        "curve": success_curve(summary, rows),
        "steps": eval_steps(summary, rows),
        "eval_pause_gain_s": eval_pause_gain(summary, rows),
        "run_dir": str(run_dir),
    }


def train_runs(
    config_path: str,
    overrides: list[str],
    mode_list: list[tuple[str, list[str]]],
    seeded_modes: Sequence[str],
    seeds: int,
    seed0: int,
    runs: Path,
    meta: dict[str, Any] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Train every mode (first seed), then the seeded modes again for the other seeds; runs already
    finished under ``runs`` are reused. Returns the first seed's results and every seeded mode's runs."""
    results: dict[str, dict[str, Any]] = {}
    for label, mode_overrides in mode_list:
        print(f"== {label}", flush=True)
        results[label] = run_mode(config_path, [*overrides, *mode_overrides], label, runs, meta)
        r = results[label]
        print(
            f"   {r['rl_wall_s']:.1f} s, {r['trajectories_per_s']:.2f} traj/s, success {r['success']:.3f}, "
            f"bubbles {json.dumps({k: round(v, 2) for k, v in r['bubble'].items()})}",
            flush=True,
        )
    seeded = {label: [results[label]] for label in seeded_modes if label in results}
    for seed in range(1, seeds):
        for label, mode_overrides in mode_list:
            if label in seeded:
                print(f"== {label}, seed {seed0 + seed}", flush=True)
                home = f"{label}_s{seed}"
                seeded[label].append(
                    run_mode(config_path, [*overrides, *mode_overrides, f"seed={seed0 + seed}"], home, runs, meta)
                )
    return results, seeded


def reread_runs(
    runs: Path, ks: list[int], in_flight: Sequence[str] = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], int]:
    """What ``train_runs`` returned, read back from the folders it left under ``runs``, and the seed count.
    A root from before a mode existed (sync_full) simply has no runs of it."""
    labels = [label for label, _ in modes(ks, True, in_flight)]
    results = {label: read_run(runs / label) for label in labels if (runs / label).is_dir()}
    seeded = {label: [results[label]] for label in curve_modes(ks, in_flight) if label in results}
    seeds = 1
    while seeded and all((runs / f"{label}_s{seeds}").is_dir() for label in seeded):
        for label in seeded:
            seeded[label].append(read_run(runs / f"{label}_s{seeds}"))
        seeds += 1
    return results, seeded, seeds
