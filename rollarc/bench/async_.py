"""``rollarc bench async``: trajectory-level asynchrony against synchronous and monolithic training.

Every mode runs the same workload (``configs/longtail.yaml`` by default: FrozenLake turns behind
heavy-tailed env latency) from the same SFT checkpoint, for the same number of training steps, on the
same pools:

- ``sync``: disaggregated (rollout and trainer each hold one unit of the compute pool), k = 0 with the
  barrier: all B×G trajectories, then train, then sync.
- ``async k``: the same placement; rollout never stops; each trained token is at most k versions old.
- ``async k`` with another ``async.in_flight_update`` (``--in-flight abort``): mode ``async_kK_abort``, the
  same runs but with turns cut by a weight update resuming on the new weights (docs/async.md#in-flight-weight-updates);
  run over as many seeds as its k, so the choice of the default is measured, not argued.
- ``monolithic``: rollout and trainer share the whole compute pool and alternate (each phase gets
  every thread of the pool), k = 0: the colocated synchronous design of most RL frameworks. It runs once,
  for throughput only; ``--no-monolithic`` leaves it out.

Reported per mode: RL wall time (first admitted group to last weight sync; SFT, Ray start-up and the
held-out evaluations are outside it), trajectories/s, the bubble fraction of each role, and held-out
success after training (200 greedy episodes on seeds disjoint from training).

Time to target (``rollarc.bench.time_to_target``): sync, k = 1 and k = 2 each run ``--seeds`` times (3), with a
held-out evaluation every ``--eval-every`` steps; the target is a held-out success every synchronous seed
reaches, and each run's time to target is the RL wall time until its success first reaches it (``null``
when it never does). ``--quick`` runs one seed.

What is trained (``rollarc.bench.trained_composition``): ``trained_success_mean`` and
``trained_vs_admitted_length_ratio``, each a map from mode (sync, async_k1, async_k2) to its median over those
seeds, from each run's ``metrics.jsonl``. ``trained_composition(run_dir)`` and
``composition_of_runs(bench_run_dirs(ROOT, modes))`` compute them after the fact for a ``--runs ROOT`` folder.
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollarc.bench import machine_load, runs_root
from rollarc.bench.report_file import add_docs_flag, emit_json, git_commit, markdown_table, publish
from rollarc.bench.time_to_target import estimate_noise, first_crossing, select_target, speedup, spread, success_curve
from rollarc.bench.trained_composition import KEYS as COMPOSITION_KEYS
from rollarc.bench.trained_composition import bench_run_dirs, composition_of_runs
from rollarc.bench.trained_composition import trained_composition as trained_composition  # re-exported
from rollarc.config import load_train_config
from rollarc.runtime.entry import initial_policy, run_training

QUICK = [
    "model.preset=nano",
    "sft.checkpoint=artifacts/sft/bench-async-quick",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=2",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_episodes=8",
    "tasks.0.latency.median_s=0.02",
    "tasks.0.env.kwargs.size=4",
    "tasks.0.agent.max_turns=8",
]


IN_FLIGHT = ("finish", "abort", "continue")  # async.in_flight_update's values


def modes(steps_k: list[int], monolithic: bool = True, in_flight: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """(label, overrides) per mode, in the order they run: sync, each k, each k again under each of
    ``in_flight`` (an ``async.in_flight_update`` value, label suffix ``_VALUE``), monolithic."""
    out = [("sync", ["async.mode=sync", "async.max_staleness=0"])]
    out += [(f"async_k{k}", ["async.mode=async", f"async.max_staleness={k}"]) for k in steps_k]
    out += [
        (f"async_k{k}_{value}", ["async.mode=async", f"async.max_staleness={k}", f"async.in_flight_update={value}"])
        for value in in_flight
        for k in steps_k
    ]
    if not monolithic:
        return out
    out.append(
        (
            "monolithic",
            [
                "async.mode=sync",
                "async.max_staleness=0",
                "cluster.roles.train.threads=2",
                "cluster.roles.rollout.threads=2",
            ],
        )
    )
    return out


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
        runs_root.record(runs, meta, label, machine_load.summary())
    return read_run(home)


def read_run(home: Path) -> dict[str, Any]:
    """One finished run's figures, from its folder ``home`` (holding the run directory) alone."""
    (run_dir,) = [p for p in home.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # periodic held-out evaluations pause the controller: they are not training time
    eval_s = sum(e.get("seconds", 0.0) for e in summary["evals"] if str(e["label"]).startswith("step_"))
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
        "run_dir": str(run_dir),
    }


# Written into a ``--runs`` root by a measured run: its commit, overrides and machine load (runs_root.py).
META_FILE = runs_root.META_FILE

# Runs per mode: two seeds could not separate an effect of k from run-to-run noise (docs/async.md#measured);
# three give a median that one bad seed cannot decide.
DEFAULT_SEEDS = 3


def time_to_target(
    start_success: float, curves: dict[str, list[list[tuple[float, float]]]], fraction: float
) -> dict[str, Any]:
    """The time-to-target keys of the JSON line, from every run's success curve (see time_to_target.py)."""
    target = select_target(start_success, curves["sync"], fraction)
    times = {
        label: [None if target is None else first_crossing(curve, target) for curve in runs]
        for label, runs in curves.items()
    }
    out: dict[str, Any] = {
        "target_success": target,
        "time_to_target_s": times,
        "time_to_target_spread_s": {label: spread(t) for label, t in times.items()},
    }
    for k in (1, 2):
        label = f"async_k{k}"
        out[f"speedup_to_target_k{k}"] = (
            speedup(times["sync"], times[label]) if label in times and target is not None else None
        )
    # every mode's, the --in-flight variants included
    out["speedup_to_target"] = {
        label: (speedup(times["sync"], t) if target is not None else None)
        for label, t in times.items()
        if label != "sync"
    }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench async", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/longtail.yaml")
    parser.add_argument("--steps", type=int, default=None, help="training steps per mode (default: the config's)")
    parser.add_argument("--ks", default="1,2,4", help="staleness bounds of the async modes")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (nano model, 2 steps, one seed)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"runs (config seeds) of sync, k=1 and k=2 for time to target (default {DEFAULT_SEEDS})",
    )
    parser.add_argument(
        "--eval-every", type=int, default=None, help="held-out evaluation every N steps (default 2; quick: 1)"
    )
    parser.add_argument(
        "--target-fraction",
        type=float,
        default=0.8,
        help="target = success before RL + this fraction of the lowest synchronous seed's gain",
    )
    parser.add_argument(
        "--monolithic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the monolithic mode once (throughput only; --no-monolithic saves a synchronous-length run)",
    )
    parser.add_argument(
        "--in-flight",
        default="",
        help="also run each async mode with these async.in_flight_update values, comma-separated (e.g. abort): "
        "modes async_kK_VALUE, over as many seeds as k",
    )
    parser.add_argument(
        "--publish-as",
        default="async",
        help="the name its block and JSON are published under (a variant must not overwrite the headline: "
        "e.g. --in-flight abort --publish-as inflight)",
    )
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    add_docs_flag(parser)
    parser.add_argument("--runs", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument(
        "--from-runs",
        default=None,
        metavar="ROOT",
        help="train nothing: publish again from the finished runs of an earlier --runs ROOT and its bench_meta.json",
    )
    parser.add_argument(
        "--export-to",
        default=None,
        metavar="DEST",
        help="train nothing: copy the --runs ROOT's record, finished runs (no timelines) and warm start to DEST, "
        "to be copied back to ROOT in a later sitting (runs_root.py)",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every mode")
    args = parser.parse_args(argv)
    if args.export_to:
        if not args.runs:
            parser.error("--export-to needs --runs ROOT (the root to export)")
        try:
            labels = runs_root.export_records(Path(args.runs), Path(args.export_to))
        except runs_root.RootMismatch as err:
            parser.error(str(err))
        print(f"exported {len(labels)} finished runs ({', '.join(labels) or 'none'}) to {args.export_to}")
        if runs_root.git_ignored(Path(args.export_to)):
            print(f"warning: git ignores {args.export_to}: a commit will not hold it (see git check-ignore -v)")
        return 0
    overrides = [*(QUICK if args.quick else []), *args.overrides]
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else DEFAULT_SEEDS)
    if seeds < 1:
        parser.error(f"--seeds {seeds}: at least one run per mode is needed")
    if not 0.0 < args.target_fraction <= 1.0:
        parser.error(f"--target-fraction {args.target_fraction}: use a fraction in (0, 1]")
    overrides.append(f"train.eval_every={args.eval_every if args.eval_every is not None else (1 if args.quick else 2)}")
    ks = [int(k) for k in args.ks.split(",") if k]
    in_flight = [v for v in args.in_flight.split(",") if v]
    unknown = sorted(set(in_flight) - set(IN_FLIGHT))
    if unknown:
        parser.error(f"--in-flight {','.join(unknown)}: use values of async.in_flight_update ({', '.join(IN_FLIGHT)})")
    if in_flight and args.publish_as == "async" and not args.no_docs:
        parser.error("--in-flight needs --publish-as NAME (the headline figures are 'async')")
    if args.from_runs:
        runs = Path(args.from_runs)
        if not (runs / META_FILE).is_file():
            parser.error(f"--from-runs {runs}: no {META_FILE} there (only a measured run writes one)")
        base = load_train_config(args.config, overrides)
        results, curves, seeds = reread_runs(runs, ks, in_flight)
        meta = json.loads((runs / META_FILE).read_text())
        command = f"rollarc bench async --from-runs {runs.name}"
        if in_flight:
            command += f" --ks {args.ks} --in-flight {args.in_flight} --publish-as {args.publish_as}"
    else:
        base = load_train_config(args.config, overrides)
        policy, _ = initial_policy(base)  # train the shared SFT warm start once, before any timing
        overrides.append(f"model.path={policy}")
        base = load_train_config(args.config, overrides)
        runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="rollarc-bench-async-"))
        try:
            meta = runs_root.open_root(runs, git_commit(), overrides)
        except runs_root.RootMismatch as err:
            parser.error(str(err))
        runs_root.record(runs, meta, None, machine_load.summary())  # so a later --from-runs has this record
        results, curves = train_runs(args, overrides, ks, in_flight, seeds, base.seed, runs, meta)
        runs_root.record(runs, meta, None, machine_load.summary())
        command = shlex.join(["rollarc", "bench", "async", *argv])
    to_target = time_to_target(results["sync"]["success_before"], curves, args.target_fraction)
    episodes = base.train.eval_episodes
    noise = estimate_noise(results["sync"]["success_before"], episodes)
    target_gain = (
        None if to_target["target_success"] is None else to_target["target_success"] - results["sync"]["success_before"]
    )
    composition = composition_of_runs(bench_run_dirs(runs, modes=list(curves)))
    sync_s = results["sync"]["rl_wall_s"]
    result = {
        "sync_s": sync_s,
        "async_s": {str(k): results[f"async_k{k}"]["rl_wall_s"] for k in ks},
        "rl_wall_s": {label: r["rl_wall_s"] for label, r in results.items()},  # every mode's, variants included
        "monolithic_s": results["monolithic"]["rl_wall_s"] if "monolithic" in results else None,
        **{f"speedup_k{k}": sync_s / results[f"async_k{k}"]["rl_wall_s"] for k in ks},
        "speedup_k2_vs_monolithic": (
            results["monolithic"]["rl_wall_s"] / results["async_k2"]["rl_wall_s"]
            if "async_k2" in results and "monolithic" in results
            else None
        ),
        "success": {label: r["success"] for label, r in results.items()},
        "success_before_rl": results["sync"]["success_before"],
        "steps": base.train.steps,
        "trajectories_per_step": base.train.groups_per_step * base.train.group_size,
        "seeds": seeds,
        **to_target,
        "heldout_episodes": episodes,
        "target_noise": noise,  # two standard errors of the start's held-out estimate
        "target_outside_noise": target_gain is not None and target_gain > noise,
        **composition,
        # per mode, per seed: [RL seconds, held-out success] at each evaluation (docs/async.md#measured)
        "curves": {label: [[list(point) for point in curve] for curve in runs_of] for label, runs_of in curves.items()},
    }
    rows = [
        [
            label,
            r["rl_wall_s"],
            sync_s / r["rl_wall_s"],
            r["trajectories_per_s"],
            r["bubble"].get("rollout", float("nan")),
            r["bubble"].get("train", float("nan")),
            r["dropped_stale_groups"],
            r["success"],
        ]
        for label, r in results.items()
    ]
    body = markdown_table(
        [
            "mode",
            "RL wall s",
            "speed-up vs sync",
            "trajectories/s",
            "rollout bubble",
            "train bubble",
            "stale groups dropped",
            "held-out success",
        ],
        rows,
    )
    body += (
        f"\n\n{base.train.steps} steps of {result['trajectories_per_step']} trajectories per mode; "
        f"held-out success before RL {result['success_before_rl']:.3f} (200 greedy episodes)."
    )
    target = to_target["target_success"]
    body += "\n\n" + markdown_table(
        ["mode", "time to target s (per seed)", "median speed-up vs sync"],
        [
            [
                label,
                ", ".join("not reached" if t is None else f"{t:.1f}" for t in times),
                "" if label == "sync" else _or_none(to_target["speedup_to_target"].get(label)),
            ]
            for label, times in to_target["time_to_target_s"].items()
        ],
    )
    body += (
        f"\n\nTarget: held-out success {target:.3f}, reached by every synchronous seed; {seeds} seed(s) per mode."
        if target is not None
        else "\n\nNo target: synchronous training did not raise held-out success above its start."
    )
    if target is not None and not result["target_outside_noise"]:
        body += (
            f" The target is within two standard errors ({noise:.3f}) of the start's held-out estimate over "
            f"{episodes} episodes: reaching it first is not evidence of equal quality sooner."
        )
    body += "\n\n" + markdown_table(
        ["mode", "trained success (median over seeds)", "trained / admitted length (median over seeds)"],
        [[label, *(_or_nan(composition[key].get(label)) for key in COMPOSITION_KEYS)] for label in curves],
    )
    body += "\n\nHeld-out success at each evaluation (every `--eval-every` steps), per seed:\n\n" + markdown_table(
        ["mode", "seed", "held-out success"],
        [
            [label, i, ", ".join(f"{success:.3f}" for _, success in curve)]
            for label, runs_of in curves.items()
            for i, curve in enumerate(runs_of)
        ],
    )
    published = {key: meta[key] for key in ("commit", "machine_load", "sessions") if key in meta}
    publish(args.publish_as, body, result, command, quick=args.quick, no_docs=args.no_docs, meta=published)
    emit_json(result)
    return 0


def train_runs(
    args: argparse.Namespace,
    overrides: list[str],
    ks: list[int],
    in_flight: list[str],
    seeds: int,
    seed0: int,
    runs: Path,
    meta: dict[str, Any] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """Train every mode (first seed), then sync, k=1 and k=2 again for the other seeds; runs already
    finished under ``runs`` are reused."""
    results: dict[str, dict[str, Any]] = {}
    for label, mode_overrides in modes(ks, args.monolithic, in_flight):
        print(f"== {label}", flush=True)
        results[label] = run_mode(args.config, [*overrides, *mode_overrides], label, runs, meta)
        r = results[label]
        print(
            f"   {r['rl_wall_s']:.1f} s, {r['trajectories_per_s']:.2f} traj/s, success {r['success']:.3f}, "
            f"bubbles {json.dumps({k: round(v, 2) for k, v in r['bubble'].items()})}",
            flush=True,
        )
    curves = {label: [results[label]["curve"]] for label in curve_modes(ks, in_flight)}
    for seed in range(1, seeds):
        for label, mode_overrides in modes(ks, True, in_flight):
            if label in curves:
                print(f"== {label}, seed {seed0 + seed}", flush=True)
                run = run_mode(
                    args.config, [*overrides, *mode_overrides, f"seed={seed0 + seed}"], f"{label}_s{seed}", runs, meta
                )
                curves[label].append(run["curve"])
    return results, curves


def reread_runs(
    runs: Path, ks: list[int], in_flight: Sequence[str] = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]], int]:
    """What ``train_runs`` returned, read back from the folders it left under ``runs``, and the seed count."""
    labels = [label for label, _ in modes(ks, True, in_flight)]
    results = {label: read_run(runs / label) for label in labels if (runs / label).is_dir()}
    curves = {label: [results[label]["curve"]] for label in curve_modes(ks, in_flight)}
    seeds = 1
    while all((runs / f"{label}_s{seeds}").is_dir() for label in curves):
        for label in curves:
            curves[label].append(read_run(runs / f"{label}_s{seeds}")["curve"])
        seeds += 1
    return results, curves, seeds


def curve_modes(ks: list[int], in_flight: Sequence[str] = ()) -> list[str]:
    """The modes run over several seeds for time to target: sync, k = 1 and 2, and their --in-flight variants."""
    seeded = [k for k in ks if k in (1, 2)]
    return ["sync", *(f"async_k{k}" for k in seeded), *(f"async_k{k}_{v}" for v in in_flight for k in seeded)]


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _or_none(value: float | None) -> str:
    return "n/a (a median run never reached the target)" if value is None else f"{value:.2f}"
