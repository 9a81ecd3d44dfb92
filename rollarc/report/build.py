"""``rollarc report RUN_DIR``: the learning curve, the per-role timeline (Gantt) and the bubble fractions.

Everything is rebuilt from the run directory's own files (``metrics.jsonl``, ``timeline.jsonl``,
``summary.json``), so a report can be regenerated at any time, also for a run that stopped early.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rollarc.report.metrics import read_jsonl

KIND_COLORS = {"generate": "tab:blue", "env_step": "tab:green", "reward": "tab:purple", "train": "tab:red",
               "sync": "tab:orange", "eval": "tab:gray"}


def busy_intervals(spans: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The union of the spans' [t0, t1] intervals, merged and sorted."""
    merged: list[tuple[float, float]] = []
    for t0, t1 in sorted((s["t0"], s["t1"]) for s in spans):
        if merged and t0 <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], t1))
        else:
            merged.append((t0, t1))
    return merged


def bubble_fractions(spans: list[dict[str, Any]], window: tuple[float, float] | None = None) -> dict[str, float]:
    """Per role: idle time / wall time, averaged over the role's workers (a worker is busy while any span runs)."""
    if not spans:
        return {}
    start = window[0] if window else min(s["t0"] for s in spans)
    end = window[1] if window else max(s["t1"] for s in spans)
    wall = max(end - start, 1e-9)
    by_worker: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for span in spans:
        if span.get("kind") == "eval":
            continue
        by_worker.setdefault((span["role"], span["worker"]), []).append(span)
    per_role: dict[str, list[float]] = {}
    for (role, _worker), worker_spans in by_worker.items():
        busy = sum(min(t1, end) - max(t0, start) for t0, t1 in busy_intervals(worker_spans) if t1 > start and t0 < end)
        per_role.setdefault(role, []).append(1.0 - busy / wall)
    return {role: sum(v) / len(v) for role, v in sorted(per_role.items())}


def plot_learning_curve(metrics: list[dict[str, Any]], evals: list[dict[str, Any]], path: Path) -> Path:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [m["step"] for m in metrics]
    if metrics:
        ax1.plot(steps, [m.get("success", float("nan")) for m in metrics], label="train success (sampled)", alpha=0.7)
    points = [(e["version"], e["success"]) for e in evals if e.get("episodes")]
    if points:
        ax1.plot(*zip(*points, strict=True), "o-", label="held-out success (greedy)", color="black")
    ax1.set_xlabel("training step (policy version)")
    ax1.set_ylabel("success rate")
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend()
    ax1.grid(alpha=0.3)
    if metrics:
        ax2.plot(steps, [m.get("reward", float("nan")) for m in metrics], label="mean reward", color="tab:green")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("reward")
    ax2.grid(alpha=0.3)
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timeline(spans: list[dict[str, Any]], path: Path, max_lanes: int = 40) -> Path:
    """A Gantt chart: one lane per worker, one bar per span, coloured by kind, so idle bubbles show."""
    lanes = sorted({(s["role"], s["worker"]) for s in spans})[:max_lanes]
    index = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.5))
    for kind, color in KIND_COLORS.items():
        for lane in lanes:
            bars = [(s["t0"], s["t1"] - s["t0"]) for s in spans
                    if s.get("kind") == kind and (s["role"], s["worker"]) == lane]
            if lane[0] in ("env", "rollout") and kind in ("generate", "env_step"):
                # Many overlapping per-trajectory spans: draw the busy union instead of thousands of bars.
                bars = [(t0, t1 - t0) for t0, t1 in busy_intervals(
                    [s for s in spans if s.get("kind") == kind and (s["role"], s["worker"]) == lane])]
            if bars:
                ax.broken_barh(bars, (index[lane] - 0.4, 0.8), facecolors=color, label=kind)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{role}:{worker}" for role, worker in lanes], fontsize=8)
    ax.set_xlabel("seconds since run start")
    ax.set_title("per-role timeline (gaps are idle bubbles)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def build_report(run_dir: str | Path) -> list[Path]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory")
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    spans = read_jsonl(run_dir / "timeline.jsonl")
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    evals = summary.get("evals") or [{"version": m["step"], "success": m["heldout_success"], "episodes": 1}
                                     for m in metrics if "heldout_success" in m]
    outputs = [plot_learning_curve(metrics, evals, run_dir / "learning_curve.png")]
    if spans:
        outputs.append(plot_timeline(spans, run_dir / "timeline.png"))
        train_spans = [s for s in spans if s.get("kind") != "eval"]
        window = tuple(summary["rl_window"]) if summary.get("rl_window") else None
        summary["bubble_fraction"] = bubble_fractions(train_spans, window)
        summary_path.write_text(json.dumps(summary, indent=1, default=str))
        outputs.append(summary_path)
    return outputs
