"""The t2i run report: learning curves (PNG), the held-out sample grids, and report.md."""

from __future__ import annotations

import json
from pathlib import Path


def _read_metrics(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def build_t2i_report(run_dir: Path) -> list[Path]:
    import matplotlib  # deferred: matplotlib is heavy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib is heavy

    rows = _read_metrics(run_dir)
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}  # none: the run is still going
    evals = summary.get("evals") or []
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    axes[0].plot([r["step"] for r in rows], [r["reward"] for r in rows], label="train reward (SDE groups)")
    axes[0].plot([e["step"] for e in evals], [e["reward"] for e in evals], "o-", label="held-out reward (ODE)")
    axes[0].set_xlabel("step")
    axes[0].legend()
    axes[1].plot(
        [r["step"] for r in rows], [r["low_contrast_fraction"] for r in rows], label="near-zero-advantage groups"
    )
    if any(r.get("kendall_tau") is not None for r in rows):
        axes[1].plot([r["step"] for r in rows], [r.get("kendall_tau") for r in rows], label="Kendall τ stale vs fresh")
    axes[1].set_xlabel("step")
    axes[1].legend()
    fig.tight_layout()
    curve = run_dir / "learning_curve.png"
    fig.savefig(curve, dpi=100)
    plt.close(fig)
    grids = sorted((run_dir / "samples").glob("heldout_step_*.png"))
    lines = [
        f"# t2i run {run_dir.name}",
        "",
        f"Held-out reward {_num(summary.get('heldout_reward_before_rl'), '.3f')} before RL, "
        f"{_num(summary.get('heldout_reward_after_rl'), '.3f')} after {summary.get('steps', len(rows))} steps "
        f"(RL wall time {_num(summary.get('rl_wall_s'), '.0f')} s; {summary.get('sampled_images', '?')} trained "
        f"images, {summary.get('explored_images', '?')} explored).",
        "",
        "![learning curve](learning_curve.png)",
        "",
        "Held-out samples (ODE, fixed seeds; prompts in samples/prompts.txt), first and last evaluation:",
        "",
    ]
    if summary.get("status") == "stopped":
        lines[1:1] = ["", f"**The run stopped early:** {summary.get('stop_reason')}"]
    lines += [f"![{g.stem}](samples/{g.name})" for g in (grids[:1] + grids[-1:] if len(grids) > 1 else grids)]
    report = run_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return [curve, report]


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
