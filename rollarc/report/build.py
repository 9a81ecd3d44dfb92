"""``rollarc report RUN_DIR``: the learning curve, the per-role timeline (Gantt), the bubble fractions and
``report.md``, one page that puts them together with the held-out table, the counters and the config.

Everything is rebuilt from the run directory's own files (``metrics.jsonl``, ``timeline.jsonl``,
``summary.json``, ``config.yaml``), read through their schema (:mod:`rollarc.report.run_dir`), so a report can be regenerated at any time, also for a run that
stopped early. ``render_report`` is pure (data in, Markdown out); ``build_report`` does the I/O.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rollarc.report.run_dir import (
    CONFIG,
    METRICS,
    SUMMARY,
    TIMELINE,
    MetricsRecord,
    RunDirError,
    Span,
    read_metrics,
    read_summary,
    read_timeline,
    to_dict,
    write_json,
)

RUN_FILES = (METRICS, TIMELINE, SUMMARY, CONFIG)
LEARNING_CURVE, TIMELINE, REPORT = "learning_curve.png", "timeline.png", "report.md"
COMPOSITION = "composition.png"
# The run's counters (summary.json, from the controller), in the order the report lists them.
COUNTERS = (
    ("steps", "training steps (policy versions)"),
    ("wall_s", "run wall time, s (from the controller's start)"),
    ("rl_wall_s", "RL wall time, s (first admitted group to last weight sync)"),
    ("total_wall_s", "total wall time, s (SFT and Ray start-up included)"),
    ("trajectories_trained", "trajectories trained"),
    ("trajectories_per_s", "trajectories trained per second of RL wall time"),
    ("groups_started", "groups started"),
    ("groups_trained", "groups trained"),
    ("dropped_stale_groups", "groups dropped as stale"),
    ("restarted_stale_groups", "groups restarted as stale"),
    ("dropped_failed_groups", "groups dropped (fewer than 2 rollouts finished)"),
    ("dropped_no_signal_groups", "groups dropped for all-equal rewards (dynamic sampling)"),
    ("kept_no_signal_groups", "groups with all-equal rewards trained past the dynamic sampling cap"),
    ("failed_trajectories", "failed trajectories"),
    ("retried_groups", "groups run again after an EnvWorker died"),
    ("env_worker_restarts", "EnvWorker restarts"),
    ("max_buffer_groups", "most groups waiting in the buffer"),
    ("max_in_flight_groups_bound", "bound on groups in flight + buffered"),
)


class ReportError(ValueError):
    """A run directory a report cannot be built from; the message is meant for the user as is."""


KIND_COLORS = {
    "generate": "tab:blue",
    "env_step": "tab:green",
    "reward": "tab:purple",
    "train": "tab:red",
    "sync": "tab:orange",
    "eval": "tab:gray",
}


def busy_intervals(spans: list[Span]) -> list[tuple[float, float]]:
    """The union of the spans' [t0, t1] intervals, merged and sorted."""
    merged: list[tuple[float, float]] = []
    for t0, t1 in sorted((s.t0, s.t1) for s in spans):
        if merged and t0 <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], t1))
        else:
            merged.append((t0, t1))
    return merged


def bubble_fractions(spans: list[Span], window: tuple[float, float] | None = None) -> dict[str, float]:
    """Per role: idle time / wall time, averaged over the role's workers (a worker is busy while any span runs)."""
    if not spans:
        return {}
    start = window[0] if window else min(s.t0 for s in spans)
    end = window[1] if window else max(s.t1 for s in spans)
    wall = max(end - start, 1e-9)
    by_worker: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        if span.kind == "eval":
            continue
        by_worker.setdefault((span.role, span.worker), []).append(span)
    per_role: dict[str, list[float]] = {}
    for (role, _worker), worker_spans in by_worker.items():
        busy = sum(min(t1, end) - max(t0, start) for t0, t1 in busy_intervals(worker_spans) if t1 > start and t0 < end)
        per_role.setdefault(role, []).append(1.0 - busy / wall)
    return {role: sum(v) / len(v) for role, v in sorted(per_role.items())}


def plot_learning_curve(metrics: list[MetricsRecord], evals: list[dict[str, Any]], path: Path) -> Path:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [m.step for m in metrics]
    if metrics:
        ax1.plot(steps, [_or_nan(m.success) for m in metrics], label="train success (sampled)", alpha=0.7)
    points = [(e["version"], e["success"]) for e in evals if e.get("episodes") != 0]  # None: count unknown
    if points:
        ax1.plot(*zip(*points, strict=True), "o-", label="held-out success (greedy)", color="black")
    ax1.set_xlabel("training step (policy version)")
    ax1.set_ylabel("success rate")
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend()
    ax1.grid(alpha=0.3)
    if metrics:
        ax2.plot(steps, [_or_nan(m.reward) for m in metrics], label="mean reward", color="tab:green")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("reward")
    ax2.grid(alpha=0.3)
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def has_composition(metrics: list[MetricsRecord]) -> bool:
    """Whether the steps record what was admitted next to what was trained (runs before that record neither)."""
    return any(m.admitted_tokens is not None and m.trained_tokens is not None for m in metrics)


SERIES = ("success", "tokens")  # what the composition plot sets side by side, trained against admitted


def composition_series(metrics: list[MetricsRecord]) -> dict[str, list[float]]:
    """The composition plot's data: ``step`` and, per quantity in ``SERIES``, ``trained_`` and ``admitted_``
    per step (NaN where a step has none)."""
    series: dict[str, list[float]] = {"step": [float(m.step) for m in metrics]}
    for quantity in SERIES:
        for prefix in ("trained", "admitted"):
            series[f"{prefix}_{quantity}"] = [_or_nan(getattr(m, f"{prefix}_{quantity}")) for m in metrics]
    return series


def plot_composition(metrics: list[MetricsRecord], path: Path) -> Path:
    """Trained against admitted groups per step: success, and length (generated tokens per trajectory).

    The admitted line is every admitted group whose rollouts ended since the previous batch, trained or not; a
    trained line below it says the batches favour failures (or short episodes) over what the run samples.
    """
    series = composition_series(metrics)
    fig, axes = plt.subplots(1, len(SERIES), figsize=(11, 4))
    labels = {"success": "success rate", "tokens": "generated tokens / trajectory"}
    for ax, quantity in zip(axes, SERIES, strict=True):
        ax.plot(series["step"], series[f"admitted_{quantity}"], "o-", label="admitted (ended since last step)")
        ax.plot(series["step"], series[f"trained_{quantity}"], "s-", label="trained (the batch)")
        ax.set_xlabel("training step")
        ax.set_ylabel(labels[quantity])
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_ylim(-0.02, 1.02)
    fig.suptitle("what is trained vs what is admitted")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timeline(spans: list[Span], path: Path, max_lanes: int = 40) -> Path:
    """A Gantt chart: one lane per worker, one bar per span, coloured by kind, so idle bubbles show."""
    lanes = sorted({(s.role, s.worker) for s in spans})[:max_lanes]
    index = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.5))
    for kind, color in KIND_COLORS.items():
        for lane in lanes:
            bars = [(s.t0, s.t1 - s.t0) for s in spans if s.kind == kind and (s.role, s.worker) == lane]
            if lane[0] in ("env", "rollout", "borrowed") and kind in ("generate", "env_step"):
                # Many overlapping per-trajectory spans: draw the busy union instead of thousands of bars.
                bars = [
                    (t0, t1 - t0)
                    for t0, t1 in busy_intervals([s for s in spans if s.kind == kind and (s.role, s.worker) == lane])
                ]
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
    """Write the plots, the bubble fractions (into summary.json) and report.md; returns the files written."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory; give a run directory (runs/NAME-YYYYmmdd-HHMMSS)")
    if not any((run_dir / name).is_file() for name in RUN_FILES):
        raise ReportError(
            f"{run_dir} holds none of {', '.join(RUN_FILES)}: it is not a run directory, or its run has not started yet"
        )
    try:
        metrics = read_metrics(run_dir)
        spans = read_timeline(run_dir)
        record = read_summary(run_dir)
    except RunDirError as err:
        raise ReportError(str(err)) from None
    summary_path = run_dir / SUMMARY
    finished = record.steps is not None  # the controller writes it at the end; a stopped run has none
    evals = record.evals or [
        {"label": f"step_{m.step}", "version": m.step, "success": m.heldout_success, "episodes": None}
        for m in metrics
        if m.heldout_success is not None
    ]
    outputs = [plot_learning_curve(metrics, evals, run_dir / LEARNING_CURVE)]
    if has_composition(metrics):
        outputs.append(plot_composition(metrics, run_dir / COMPOSITION))
    if spans:
        outputs.append(plot_timeline(spans, run_dir / TIMELINE))
        train_spans = [s for s in spans if s.kind != "eval"]
        window = (record.rl_window[0], record.rl_window[1]) if record.rl_window else None
        record.bubble_fraction = bubble_fractions(train_spans, window)
        write_json(summary_path, record)
        outputs.append(summary_path)
    summary = to_dict(record)
    config_path = run_dir / "config.yaml"
    text = render_report(
        run_dir.name,
        metrics=metrics,
        summary=summary,
        evals=evals,
        finished=finished,
        config_yaml=config_path.read_text() if config_path.is_file() else None,
        images=[p.name for p in outputs if p.suffix == ".png"],
    )
    report = run_dir / REPORT
    tmp = run_dir / f".{REPORT}.tmp"
    tmp.write_text(text)
    tmp.replace(report)
    outputs.append(report)
    return outputs


def render_report(
    name: str,
    *,
    metrics: list[MetricsRecord],
    summary: dict[str, Any],
    evals: list[dict[str, Any]],
    finished: bool,
    config_yaml: str | None,
    images: list[str],
) -> str:
    """``report.md``: held-out table, training figures, plots, bubbles, counters and the resolved config."""
    lines = [
        f"# Run report: {name}",
        "",
        (
            "Built by `rollarc report RUN_DIR` from this directory's `metrics.jsonl`, `timeline.jsonl`, "
            "`summary.json` and `config.yaml`; running it again rebuilds this page and the plots."
        ),
        "",
    ]
    if not finished:
        lines += [
            (
                "**No `summary.json`: the run did not finish** (it stopped or is still running). The figures "
                "below come from what it logged so far."
            ),
            "",
        ]
    lines += ["## Held-out success", ""]
    lines += _heldout_section(summary, evals)
    lines += ["## Learning curve", ""]
    if LEARNING_CURVE in images:
        lines += [f"![learning curve]({LEARNING_CURVE})", ""]
    lines += _training_section(metrics)
    if COMPOSITION in images:
        lines += [
            "## What is trained",
            "",
            (
                "Success and length (generated tokens per trajectory) of each step's batch against the admitted "
                "groups whose rollouts ended since the previous batch (docs/async.md#what-is-trained-is-visible)."
            ),
            "",
            f"![trained vs admitted]({COMPOSITION})",
            "",
        ]
    lines += ["## Timeline and bubbles", ""]
    if TIMELINE in images:
        lines += [f"![per-role timeline]({TIMELINE})", ""]
    else:
        lines += ["No `timeline.jsonl` spans: no timeline or bubble fractions.", ""]
    bubbles = summary.get("bubble_fraction") or {}
    if bubbles:
        where = "the RL window" if summary.get("rl_window") else "the whole timeline"
        lines += [
            (
                f"Bubble fraction per role: idle time / wall time over {where}, averaged over the role's "
                "workers (held-out evaluation excluded)."
            ),
            "",
            "| role | bubble fraction |",
            "|---|---|",
        ]
        lines += [f"| {role} | {_num(value)} |" for role, value in bubbles.items()]
        lines.append("")
    lines += ["## Counters", ""]
    lines += _counters_section(summary)
    lines += ["## Config", ""]
    if config_yaml is None:
        lines += ["No `config.yaml` in the run directory.", ""]
    else:
        lines += [
            "The resolved config (every default spelled out), as `config.yaml` holds it:",
            "",
            "```yaml",
            config_yaml.rstrip("\n"),
            "```",
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


def _signal_sentence(fraction: float | None, summary: dict[str, Any]) -> str:
    """How much of each batch could teach anything: groups whose rewards were all equal have no gradient;
    with dynamic sampling, also how many finished groups were dropped for that."""
    if fraction is None:
        return ""
    sentence = (
        f" On average {100.0 * fraction:.0f} % of each step's trained groups had a learning signal (rewards that "
        "differ within the group; the rest had zero advantage)."
    )
    dropped, share = summary.get("dropped_no_signal_groups") or 0, summary.get("finished_signal_share")
    if dropped and share is not None:
        sentence += (
            f" Dynamic sampling dropped {dropped:,} finished groups whose rewards were all equal: "
            f"{100.0 * share:.0f} % of the finished groups had a signal."
        )
    return sentence


def _heldout_section(summary: dict[str, Any], evals: list[dict[str, Any]]) -> list[str]:
    if not evals:
        return ["No held-out evaluation was recorded.", ""]
    lines: list[str] = []
    before, after = summary.get("heldout_success_before_rl"), summary.get("heldout_success_after_rl")
    if before is not None and after is not None:
        lines += [
            (
                f"Held-out success **{_num(before)} before RL -> {_num(after)} after RL** "
                f"({summary.get('heldout_episodes', '?')} greedy episodes on seeds training never sees): "
                f"RL added **{100.0 * (after - before):+.1f} points** beyond the warm start."
                + _signal_sentence(summary.get("signal_groups_frac_mean"), summary)
            ),
            "",
        ]
    tasks = sorted({task for e in evals for task in (e.get("per_task") or {})})
    per_task = len(tasks) > 1
    header = ["evaluation", "policy version", "episodes", "success", "mean reward", "failed"]
    header += [f"success: {t}" for t in tasks] if per_task else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in evals:
        row = [
            _label(e.get("label", "")),
            e.get("version"),
            e.get("episodes"),
            e.get("success"),
            e.get("reward"),
            e.get("failed"),
        ]
        row += [(e.get("per_task") or {}).get(t) for t in tasks] if per_task else []
        lines.append("| " + " | ".join(_num(v) for v in row) + " |")
    return [*lines, ""]


def _training_section(metrics: list[MetricsRecord]) -> list[str]:
    if not metrics:
        return ["No training step was logged (`metrics.jsonl` is missing or empty).", ""]
    first, last = metrics[0], metrics[-1]
    lines = [
        f"{len(metrics)} training steps logged (steps {first.step} to {last.step}).",
        "",
        "| per step | first step | last step | mean | max |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("success", "train success (sampled)"),
        ("reward", "mean reward"),
        ("step_time_s", "step time, s"),
        ("gen_tok_s", "generated tokens/s"),
        ("staleness_max", "max staleness (versions)"),
        ("loss", "loss"),
    ):
        values = [getattr(m, key) for m in metrics if getattr(m, key) is not None]
        if values:
            lines.append(
                f"| {label} | {_num(getattr(first, key))} | {_num(getattr(last, key))} | "
                f"{_num(sum(values) / len(values))} | {_num(max(values))} |"
            )
    return [*lines, ""]


def _counters_section(summary: dict[str, Any]) -> list[str]:
    rows = [(label, summary[key]) for key, label in COUNTERS if key in summary]
    dead = (summary.get("routing") or {}).get("dead_replicas")
    if dead is not None:
        rows.append(("dead rollout replicas", ", ".join(dead) or "none"))
    if not rows:
        return ["No counters: `summary.json` is missing.", ""]
    lines = ["| counter | value |", "|---|---|", *[f"| {label} | {_num(value)} |" for label, value in rows], ""]
    reasons = summary.get("failure_reasons") or {}
    if reasons:
        top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        lines += ["Most common failure reasons:", "", "| reason | trajectories |", "|---|---|"]
        lines += [f"| {reason.replace('|', '/')} | {count} |" for reason, count in top]
        lines.append("")
        examples = summary.get("failure_examples") or {}
        lines += [f"- `{kind}`: {example}" for kind, _ in top for example in examples.get(kind, [])[:1]]
        lines.append("")
    if summary.get("status") == "stopped":
        lines = [f"**The run stopped early:** {summary.get('stop_reason')}", "", *lines]
    return lines


def _label(label: str) -> str:
    return {"before_rl": "before RL", "after_rl": "after RL"}.get(label, label.replace("step_", "step "))


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value
