"""What ``rollarc bench async`` publishes: the throughput keys of its JSON line and its block in
``docs/benchmarks.md`` (tables of every mode, time to target, what was trained and the held-out curves).
"""

from __future__ import annotations

from typing import Any

from rollarc.bench.async_target import GRID_ERROR_LIMIT
from rollarc.bench.report_file import markdown_table
from rollarc.bench.trained_composition import KEYS as COMPOSITION_KEYS


def throughput(results: dict[str, dict[str, Any]], ks: list[int]) -> dict[str, Any]:
    """The first seed's RL wall times and their ratios (``sync_s`` and ``speedup_kK`` against the split sync mode,
    as before; ``None`` when it did not run)."""
    sync_s = results["sync"]["rl_wall_s"] if "sync" in results else None
    walls = {label: r["rl_wall_s"] for label, r in results.items()}
    return {
        "sync_s": sync_s,
        "async_s": {str(k): walls[f"async_k{k}"] for k in ks},
        "rl_wall_s": walls,  # every mode's, variants included
        "monolithic_s": walls.get("monolithic"),
        **{f"speedup_k{k}": None if sync_s is None else sync_s / walls[f"async_k{k}"] for k in ks},
        "speedup_k2_vs_monolithic": (
            walls["monolithic"] / walls["async_k2"] if "async_k2" in walls and "monolithic" in walls else None
        ),
    }


def report(result: dict[str, Any], results: dict[str, dict[str, Any]], steps: int, seeded: dict[str, list[Any]]) -> str:
    """The benchmark's block in docs/benchmarks.md."""
    baseline = result["baseline_mode"]
    reference = baseline if baseline is not None else next(iter(results))
    ref_s = results[reference]["rl_wall_s"] if reference in results else float("nan")
    setups = result["mode_setup"]

    def given(label: str) -> str:
        s = setups.get(label)
        if s is None:
            return ""
        threads = f"train {s['threads']['train']}, rollout {'/'.join(map(str, s['threads']['rollout']))}"
        return f"{s['async']} k={s['max_staleness']}, {threads} threads, correction {s['correction']}"

    body = f"Workload: `{result['workload']['config']}` ({result['workload']['tail']}).\n\n"
    body += markdown_table(
        [
            "mode",
            "given",
            "RL wall s",
            f"speed-up vs {reference}",
            "trajectories/s",
            "rollout bubble",
            "train bubble",
            "stale groups dropped",
            "held-out success",
        ],
        [
            [
                label,
                given(label),
                r["rl_wall_s"],
                ref_s / r["rl_wall_s"],
                r["trajectories_per_s"],
                r["bubble"].get("rollout", float("nan")),
                r["bubble"].get("train", float("nan")),
                r["dropped_stale_groups"],
                r["success"],
            ]
            for label, r in results.items()
        ],
    )
    body += (
        f"\n\n{steps} steps of {result['trajectories_per_step']} trajectories per mode (first seed), a held-out "
        f"evaluation every {result['eval_every']} steps"
        + (
            " (deferred: scored from snapshots after the run, no pause between steps)"
            if result.get("eval_deferred")
            else ""
        )
        + f"; held-out success before RL {result['success_before_rl']:.3f}."
    )
    target = result["target"]
    if target is None:
        body += "\n\nNo target: synchronous training did not raise held-out success above its start."
    else:
        body += f"\n\nTarget: held-out success {target:.3f} ({result['target_source']}); {result['seeds']} seed(s) per mode."
        body += f" Baseline: **{baseline or 'none (no synchronous mode reached the target in its median seed)'}**."
        against = result["speedup_to_target"]
        bounds = result["baseline_speedup_bounds"].get(baseline, {}) if baseline else {}
        body += "\n\n" + markdown_table(
            [
                "mode",
                "time to target s (per seed)",
                "steps to target (per seed)",
                f"speed-up vs {baseline} [grid bounds]",
            ],
            [
                [
                    label,
                    ", ".join("not reached" if t is None else f"{t:.1f}" for t in times),
                    ", ".join("-" if n is None else str(n) for n in result["steps_to_target"][label]),
                    "" if label == baseline else ratio_text(against.get(label), bounds.get(label)),
                ]
                for label, times in result["time_to_target_s"].items()
            ],
        )
        body += (
            f"\n\nTimes are interpolated between the evaluations around each crossing; grid error (the largest relative "
            f"width of a reported ratio's bounds) {grid_text(result)}"
            + (f", **over the {GRID_ERROR_LIMIT:.0%} limit**." if result["grid_error_over_limit"] else ".")
        )
        gains = ", ".join(
            f"{label} {'n/a' if g is None else f'{g:+.1f} s'}" for label, g in result["eval_pause_gain_s"].items()
        )
        body += (
            f" A step right after an evaluation was shorter than the others by (median): {gains}; that is work done "
            "during an evaluation's pause, which RL wall time leaves out."
        )
        if not result["target_outside_noise"]:
            body += (
                f" The target is within two standard errors ({result['target_noise']:.3f}) of the start's held-out "
                f"estimate over {result['heldout_episodes']} episodes: reaching it first is not evidence of equal "
                "quality sooner."
            )
    body += "\n\n" + markdown_table(
        ["mode", "trained success (median over seeds)", "trained / admitted length (median over seeds)"],
        [[label, *(or_nan(result[key].get(label)) for key in COMPOSITION_KEYS)] for label in seeded],
    )
    body += "\n\nHeld-out success at each evaluation, per seed:\n\n" + markdown_table(
        ["mode", "seed", "held-out success"],
        [
            [label, i, ", ".join(f"{success:.3f}" for _, success in r["curve"])]
            for label, of in seeded.items()
            for i, r in enumerate(of)
        ],
    )
    return body


def ratio_text(value: float | None, bounds: list[float | None] | None) -> str:
    if value is None:
        return "n/a (a median run never reached the target)"
    if bounds is None:
        return f"{value:.2f}"
    lo, hi = bounds
    return f"{value:.2f} [{lo:.2f}, {'unbounded' if hi is None else f'{hi:.2f}'}]"


def grid_text(result: dict[str, Any]) -> str:
    """``grid_error`` in words: a percentage, unbounded, or none when no ratio was reported."""
    value = result["grid_error"]
    if value is not None:
        return f"{value:.1%}"
    return "unbounded" if result["grid_error_over_limit"] else "n/a (no ratio reported)"


def or_nan(value: float | None) -> float:
    return float("nan") if value is None else value
