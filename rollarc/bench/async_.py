"""``rollarc bench async``: trajectory-level asynchrony against the strongest synchronous baseline.

Every mode runs the same workload (``configs/longtail.yaml`` by default: FrozenLake turns behind
heavy-tailed env latency; ``--config`` another, ``--no-latency`` the same with every task's env latency off)
from the same SFT checkpoint, for the same number of training steps, on the same pools. Synchronous modes
(k = 0, the barrier: all B×G trajectories, then train, then sync):

- ``sync``: the config's placement as it is (``longtail.yaml``: trainer and engine 1 thread each) and its
  correction (TIS): one core idles in each phase. Kept, labelled, so the 2026-12-03 figure can be reproduced.
- ``sync_full``: each phase gets the whole machine (every role's threads = its pool's count, as
  ``configs/quickstart.yaml``'s synchronous recipe: the phases alternate, so they never compete) and no
  off-policy correction (``algo.correction: none``: at k = 0 the behaviour policy is the trained one, and the
  trainer then skips the no-grad forward for ``logp_prox``).
- ``monolithic``: the same whole-machine placement with the config's correction (TIS), the colocated
  synchronous design of most RL frameworks as this benchmark ran it before; ``--no-monolithic`` leaves it out.

Asynchronous modes split the same cores as the config does: ``async k`` (rollout never stops; each trained
token is at most k versions old) and, with ``--in-flight abort``, ``async_kK_abort`` (turns cut by a weight
update resume on the new weights, docs/async.md#in-flight-weight-updates).

Reported per mode: RL wall time (first admitted group to last weight sync; SFT, Ray start-up and the
held-out evaluations are outside it), trajectories/s, the bubble fraction of each role, held-out success
after training (200 greedy episodes on seeds disjoint from training), and what each mode was given
(``mode_setup``: threads, correction, k).

Time to target (``rollarc.bench.time_to_target``): every synchronous mode, k = 1 and k = 2 run ``--seeds``
times (3) with a held-out evaluation every ``--eval-every`` steps. The target is fixed before the runs
(``--target X`` or ``--target-from`` an earlier published JSON; only without either is it selected after the
runs from the synchronous curves, and the JSON says so in ``target_source``). A run's time to target is
interpolated between the evaluations around its first crossing, with those evaluations' times as bounds.
The baseline (``baseline_mode``) is the synchronous mode with the least median time to target;
``speedup_to_target_k1``/``_k2`` are against it, ``baseline_speedups`` are every mode against every
synchronous mode, and ``grid_error`` is the largest relative width of any of those ratios' bounds (warned
above ``GRID_ERROR_LIMIT``). ``--quick`` runs one seed.

What is trained (``rollarc.bench.trained_composition``): ``trained_success_mean`` and
``trained_vs_admitted_length_ratio``, each a map from mode to its median over those seeds, from each run's
``metrics.jsonl``. ``trained_composition(run_dir)`` and ``composition_of_runs(bench_run_dirs(ROOT, modes))``
compute them after the fact for a ``--runs ROOT`` folder.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollarc.bench import machine_load, runs_root
from rollarc.bench.report_file import add_docs_flag, emit_json, git_commit, markdown_table, publish
from rollarc.bench.time_to_target import (
    Crossing,
    Ratio,
    crossing,
    estimate_noise,
    eval_pause_gain,
    eval_steps,
    grid_error,
    ratio_with_bounds,
    select_target,
    spread,
    strongest,
    success_curve,
)
from rollarc.bench.trained_composition import KEYS as COMPOSITION_KEYS
from rollarc.bench.trained_composition import bench_run_dirs, composition_of_runs
from rollarc.bench.trained_composition import trained_composition as trained_composition  # re-exported
from rollarc.config import Config, load_train_config
from rollarc.envs.latency import LatencyModel
from rollarc.runtime.entry import initial_policy, run_training

DEFAULT_CONFIG = "configs/longtail.yaml"

# A smoke run's shape: any workload, shrunk; the task-specific shrinks are in quick_overrides
QUICK = [
    "model.preset=nano",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=2",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_episodes=8",
]


IN_FLIGHT = ("finish", "abort", "continue")  # async.in_flight_update's values
SYNC_MODES = ("sync", "sync_full", "monolithic")  # the synchronous candidates for the baseline, in run order

# A ratio's grid bounds are about E x (1/n_base + 1/n_other) wide, relative, for an evaluation every E steps and
# crossings after n steps; on longtail.yaml the modes crossed after 60-90 steps (2026-12-03), so E = 2 keeps the
# width near 6 % (E = 3 near 9 %, too close to the limit for a mode that crosses sooner). An evaluation
# (200 episodes, about 20 s there) is outside RL wall time in every mode.
DEFAULT_EVAL_EVERY = 2
GRID_ERROR_LIMIT = 0.10  # the grid may not move a reported ratio by more than this (issue 40)


def quick_overrides(cfg: Config) -> list[str]:
    """``QUICK`` plus each task's own shrink: a FrozenLake task on a 4x4 map in 8 turns, env latency 5x shorter."""
    out = [*QUICK, f"sft.checkpoint=artifacts/sft/bench-async-quick-{cfg.name}"]
    for i, task in enumerate(cfg.tasks):
        if task.latency.kind == "lognormal" and task.latency.median_s is not None:
            out.append(f"tasks.{i}.latency.median_s={task.latency.median_s / 5}")
        if task.env is not None and task.env.id == "frozen_lake":
            out += [f"tasks.{i}.env.kwargs.size=4", f"tasks.{i}.agent.max_turns={min(8, task.agent.max_turns)}"]
    return out


def no_latency(cfg: Config) -> list[str]:
    """Every task's env latency (and its injected failures) off."""
    return [f"tasks.{i}.latency={{kind: none}}" for i in range(len(cfg.tasks))]


def whole_machine(cfg: Config) -> list[str]:
    """Each role's torch threads = every unit of its pool: what a synchronous run, whose phases alternate, may use."""
    pools = cfg.cluster.pools
    train = cfg.cluster.roles.train
    rollout = [{**r.model_dump(mode="json"), "threads": int(pools[r.pool].count)} for r in cfg.cluster.roles.rollout]
    return [
        f"cluster.roles.train.threads={int(pools[train.pool].count)}",
        f"cluster.roles.rollout={json.dumps(rollout)}",
    ]


def no_correction(cfg: Config) -> list[str]:
    """``algo.correction: none``, and the correction's own settings back to their defaults (else an error)."""
    out = ["algo.correction=none"]
    fields = type(cfg.algo).model_fields
    for name in ("tis_cap", "decoupled_cap"):
        if getattr(cfg.algo, name) != fields[name].default:
            out.append(f"algo.{name}={json.dumps(fields[name].default)}")
    return out


def modes(
    steps_k: list[int],
    monolithic: bool = True,
    in_flight: Sequence[str] = (),
    whole: Sequence[str] = (),
    uncorrected: Sequence[str] = ("algo.correction=none",),
    split_sync: bool = True,
) -> list[tuple[str, list[str]]]:
    """(label, overrides) per mode, in the order they run: sync (the config's placement), sync_full (``whole``
    machine per phase, ``uncorrected``), each k, each k again under each of ``in_flight`` (an
    ``async.in_flight_update`` value, label suffix ``_VALUE``), monolithic (``whole``, the config's correction)."""
    sync = ["async.mode=sync", "async.max_staleness=0"]
    out = [("sync", sync)] if split_sync else []
    out.append(("sync_full", [*sync, *whole, *uncorrected]))
    out += [(f"async_k{k}", ["async.mode=async", f"async.max_staleness={k}"]) for k in steps_k]
    out += [
        (f"async_k{k}_{value}", ["async.mode=async", f"async.max_staleness={k}", f"async.in_flight_update={value}"])
        for value in in_flight
        for k in steps_k
    ]
    if monolithic:
        out.append(("monolithic", [*sync, *whole]))
    return out


def mode_setup(cfg: Config) -> dict[str, Any]:
    """What one mode was given: its loop, bound, correction and threads (for the JSON and the README row)."""
    return {
        "async": cfg.async_.mode,
        "max_staleness": cfg.async_.max_staleness,
        "in_flight_update": cfg.async_.in_flight_update,
        "correction": cfg.algo.correction,
        "threads": {
            "train": cfg.cluster.roles.train.threads,
            "rollout": [r.threads for r in cfg.cluster.roles.rollout],
        },
    }


def workload(config_path: str, cfg: Config, latency_off: bool) -> dict[str, Any]:
    """The workload key: the config, and where its tail comes from (env latency, turns and reply lengths)."""
    parts = []
    latency = False
    for task in cfg.tasks:
        lat = task.latency
        model = LatencyModel(lat)
        if model.inert:
            env = "no env latency"
        else:
            latency = True
            env = (
                f"env latency {lat.kind} median {model.analytic_quantile(0.5):.3g} s, p99 "
                f"{model.analytic_quantile(0.99):.3g} s, {lat.failure_prob:.0%} of steps fail"
            )
        turns = task.agent
        parts.append(f"{task.name}: {env}; up to {turns.max_turns} turns of up to {turns.max_tokens_per_turn} tokens")
    return {
        "config": config_path,
        "name": cfg.name,
        "latency_off": latency_off,
        "env_latency": latency,  # whether any task waits on injected env latency
        "tail": "; ".join(parts),
        "about": header_comment(Path(config_path)),
    }


def header_comment(path: Path) -> str:
    """The config file's leading comment: its author's description of the workload."""
    lines = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


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
        "steps": eval_steps(summary, rows),
        "eval_pause_gain_s": eval_pause_gain(summary, rows),
        "run_dir": str(run_dir),
    }


# Written into a ``--runs`` root by a measured run: its commit, overrides and machine load (runs_root.py).
META_FILE = runs_root.META_FILE

# Runs per mode: two seeds could not separate an effect of k from run-to-run noise (docs/async.md#measured);
# three give a median that one bad seed cannot decide.
DEFAULT_SEEDS = 3


def time_to_target(runs: dict[str, list[dict[str, Any]]], target: float | None, source: str) -> dict[str, Any]:
    """The time-to-target keys of the JSON line, from every seed's run of every seeded mode (each with its
    ``curve`` and the ``steps`` of its points) and a target (``None``: no target, every time is ``null``)."""
    crossings: dict[str, list[Crossing | None]] = {
        label: [None if target is None else crossing(r["curve"], target) for r in seeds]
        for label, seeds in runs.items()
    }
    sync_modes = [label for label in runs if label in SYNC_MODES]
    baseline = strongest({label: crossings[label] for label in sync_modes})
    ratios = {
        s: {label: ratio_with_bounds(crossings[s], c) for label, c in crossings.items() if label != s}
        for s in sync_modes
    }
    times = {label: [None if c is None else c.t for c in cs] for label, cs in crossings.items()}
    out: dict[str, Any] = {
        "target": target,
        "target_source": source,
        "time_to_target_s": times,
        # the crossing lies between these two evaluations' times: [last below the target, first at or above]
        "time_to_target_bounds_s": {
            label: [None if c is None else [c.lo, c.hi] for c in cs] for label, cs in crossings.items()
        },
        # the step of the first evaluation at or above the target
        "steps_to_target": {
            label: [None if c is None else r["steps"][c.index] for c, r in zip(cs, runs[label], strict=True)]
            for label, cs in crossings.items()
        },
        "time_to_target_spread_s": {label: spread(t) for label, t in times.items()},
        "sync_modes": sync_modes,
        "baseline_mode": baseline,
        "baseline_speedups": {s: {label: _value(r) for label, r in row.items()} for s, row in ratios.items()},
        "baseline_speedup_bounds": {s: {label: _bounds(r) for label, r in row.items()} for s, row in ratios.items()},
    }
    against = ratios.get(baseline, {}) if baseline is not None else {}
    for k in (1, 2):
        out[f"speedup_to_target_k{k}"] = _value(against.get(f"async_k{k}"))
        out[f"speedup_to_target_k{k}_bounds"] = _bounds(against.get(f"async_k{k}"))
    out["speedup_to_target"] = {label: _value(r) for label, r in against.items()}  # every mode's, against the baseline
    reported = [r for row in ratios.values() for r in row.values() if r is not None]
    error = grid_error(reported)
    unbounded = any(r.hi is None for r in reported)
    out["grid_error"] = error
    out["grid_error_limit"] = GRID_ERROR_LIMIT
    out["grid_error_over_limit"] = unbounded or (error is not None and error > GRID_ERROR_LIMIT)
    return out


def _value(ratio: Ratio | None) -> float | None:
    return None if ratio is None else ratio.value


def _bounds(ratio: Ratio | None) -> list[float | None] | None:
    return None if ratio is None else [ratio.lo, ratio.hi]


def fixed_target(target: float | None, target_from: str | None) -> tuple[float | None, str]:
    """The target fixed before the runs and where it came from; ``(None, "")`` when none was given."""
    if target is not None:
        return target, "--target, fixed before the runs"
    if target_from is None:
        return None, ""
    data = json.loads(Path(target_from).read_text())
    value = data.get("target", data.get("target_success"))
    if not isinstance(value, int | float):
        raise ValueError(f"--target-from {target_from}: no numeric 'target' or 'target_success' in it")
    commit = f" at commit {data['commit']}" if data.get("commit") else ""
    return float(value), f"the target of {target_from} (the run{commit}), fixed before these runs"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench async", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--steps", type=int, default=None, help="training steps per mode (default: the config's)")
    parser.add_argument("--ks", default="1,2,4", help="staleness bounds of the async modes")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (nano model, 2 steps, one seed)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"runs (config seeds) of each synchronous mode, k=1 and k=2 for time to target (default {DEFAULT_SEEDS})",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help=f"held-out evaluation every N steps (default {DEFAULT_EVAL_EVERY}, keeping the grid error under "
        f"{100 * GRID_ERROR_LIMIT:.0f} %% on configs/longtail.yaml; quick: 1)",
    )
    parser.add_argument(
        "--target", type=float, default=None, help="the held-out success to reach, fixed before the runs"
    )
    parser.add_argument(
        "--target-from",
        default=None,
        metavar="JSON",
        help="take the target from an earlier run's published JSON (its 'target' or 'target_success')",
    )
    parser.add_argument(
        "--target-fraction",
        type=float,
        default=0.8,
        help="only without --target/--target-from (a fallback, labelled in the JSON): target = success before RL + "
        "this fraction of the lowest synchronous seed's gain, chosen after the runs",
    )
    parser.add_argument(
        "--monolithic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the monolithic mode (whole machine per phase, the config's correction) over every seed",
    )
    parser.add_argument(
        "--split-sync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the sync mode with the config's own placement and correction (the earlier baseline)",
    )
    parser.add_argument(
        "--no-latency",
        action="store_true",
        help="every task's env latency off (published as async_nolatency unless --publish-as says otherwise)",
    )
    parser.add_argument(
        "--in-flight",
        default="",
        help="also run each async mode with these async.in_flight_update values, comma-separated (e.g. abort): "
        "modes async_kK_VALUE, over as many seeds as k",
    )
    parser.add_argument(
        "--publish-as",
        default=None,
        help="the name its block and JSON are published under (default async; with --no-latency async_nolatency); "
        "a variant or another --config must name its own (e.g. --config configs/gentail.yaml --publish-as "
        "async_gentail)",
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
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else DEFAULT_SEEDS)
    if seeds < 1:
        parser.error(f"--seeds {seeds}: at least one run per mode is needed")
    if not 0.0 < args.target_fraction <= 1.0:
        parser.error(f"--target-fraction {args.target_fraction}: use a fraction in (0, 1]")
    if args.target is not None and not 0.0 < args.target <= 1.0:
        parser.error(f"--target {args.target}: use a held-out success in (0, 1]")
    if args.target is not None and args.target_from:
        parser.error("--target and --target-from both fix the target: give one")
    if args.target_from and not Path(args.target_from).is_file():
        parser.error(f"--target-from {args.target_from}: no such file (a JSON that `rollarc bench async` published)")
    try:
        target, target_source = fixed_target(args.target, args.target_from)
    except (ValueError, json.JSONDecodeError) as err:
        parser.error(f"--target-from {args.target_from}: {err}")
    ks = [int(k) for k in args.ks.split(",") if k]
    in_flight = [v for v in args.in_flight.split(",") if v]
    unknown = sorted(set(in_flight) - set(IN_FLIGHT))
    if unknown:
        parser.error(f"--in-flight {','.join(unknown)}: use values of async.in_flight_update ({', '.join(IN_FLIGHT)})")
    publish_as = args.publish_as or ("async_nolatency" if args.no_latency else "async")
    if args.publish_as is None and not (args.no_docs or args.quick):
        if in_flight:
            parser.error("--in-flight needs --publish-as NAME (the headline figures are 'async')")
        if Path(args.config) != Path(DEFAULT_CONFIG):
            parser.error(
                f"--config {args.config} needs --publish-as NAME (the headline figures are {DEFAULT_CONFIG}'s)"
            )
    plain = load_train_config(args.config, args.overrides)
    overrides = [*(quick_overrides(plain) if args.quick else []), *args.overrides]
    if args.no_latency:
        overrides += no_latency(plain)
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    eval_every = args.eval_every if args.eval_every is not None else (1 if args.quick else DEFAULT_EVAL_EVERY)
    overrides.append(f"train.eval_every={eval_every}")
    meta: dict[str, Any] = {}
    if args.from_runs:
        runs = Path(args.from_runs)
        if not (runs / META_FILE).is_file():
            parser.error(f"--from-runs {runs}: no {META_FILE} there (only a measured run writes one)")
        meta = json.loads((runs / META_FILE).read_text())
        # the overrides the runs had (their steps, evaluation grid, latency), not this invocation's
        overrides = [o for o in meta.get("overrides", overrides) if not o.startswith("model.path=")]
    base = load_train_config(args.config, overrides)
    mode_list = modes(ks, args.monolithic, in_flight, whole_machine(base), no_correction(base), args.split_sync)
    setups = {label: mode_setup(load_train_config(args.config, [*overrides, *o])) for label, o in mode_list}
    latency_off = set(no_latency(plain)) <= set(overrides)
    if args.from_runs:
        results, seeded, seeds = reread_runs(runs, ks, in_flight)
        command = f"rollarc bench async --from-runs {runs.name}"
        if in_flight:
            command += f" --ks {args.ks} --in-flight {args.in_flight} --publish-as {publish_as}"
        for flag, value in (("--target", args.target), ("--target-from", args.target_from)):
            command += "" if value is None else f" {flag} {value}"
    else:
        policy, _ = initial_policy(base)  # train the shared SFT warm start once, before any timing
        overrides.append(f"model.path={policy}")
        base = load_train_config(args.config, overrides)
        runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="rollarc-bench-async-"))
        try:
            meta = runs_root.open_root(runs, git_commit(), overrides)
        except runs_root.RootMismatch as err:
            parser.error(str(err))
        runs_root.record(runs, meta, None, machine_load.summary())  # so a later --from-runs has this record
        results, seeded = train_runs(
            args.config, overrides, mode_list, curve_modes(ks, in_flight), seeds, base.seed, runs, meta
        )
        runs_root.record(runs, meta, None, machine_load.summary())
        command = shlex.join(["rollarc", "bench", "async", *argv])
    start = next(iter(results.values()))["success_before"]  # every mode starts from the same warm start
    if target is None:
        sync_curves = [r["curve"] for label, of in seeded.items() if label in SYNC_MODES for r in of]
        target = select_target(start, sync_curves, args.target_fraction)
        target_source = (
            f"fallback, chosen after the runs: success before RL + {args.target_fraction:g} x the lowest synchronous "
            "seed's best gain (pass --target to fix it before the runs)"
        )
        if not args.quick:
            print(f"warning: no --target: the target was {target_source}", flush=True)
    to_target = time_to_target(seeded, target, target_source)
    if to_target["grid_error_over_limit"]:
        print(
            f"warning: grid error {_grid_text(to_target)} exceeds {GRID_ERROR_LIMIT:.0%}: the evaluation "
            "grid alone could move a reported ratio that much; evaluate more often (--eval-every)",
            flush=True,
        )
    episodes = base.train.eval_episodes
    noise = estimate_noise(start, episodes)
    target_gain = None if target is None else target - start
    composition = composition_of_runs(bench_run_dirs(runs, modes=list(seeded)))
    result = {
        "workload": workload(args.config, base, latency_off),
        "mode_setup": {label: setups[label] for label in results if label in setups},
        **throughput(results, ks),
        "success": {label: r["success"] for label, r in results.items()},
        "success_before_rl": start,
        "steps": base.train.steps,
        "eval_every": base.train.eval_every,
        "trajectories_per_step": base.train.groups_per_step * base.train.group_size,
        "seeds": seeds,
        **to_target,
        "heldout_episodes": episodes,
        "target_noise": noise,  # two standard errors of the start's held-out estimate
        "target_outside_noise": target_gain is not None and target_gain > noise,
        # per mode, median over seeds: how much shorter a step right after an evaluation was than the others
        # (seconds): work done during the evaluation's pause, which RL wall time leaves out (time_to_target.py)
        "eval_pause_gain_s": {
            label: _median_or_none([r["eval_pause_gain_s"] for r in of]) for label, of in seeded.items()
        },
        **composition,
        # per mode, per seed: [RL seconds, held-out success] at each evaluation (docs/async.md#measured)
        "curves": {label: [[list(point) for point in r["curve"]] for r in of] for label, of in seeded.items()},
    }
    body = report(result, results, base.train.steps, seeded)
    published: dict[str, Any] = {key: meta[key] for key in ("commit", "machine_load", "sessions") if key in meta}
    publish(publish_as, body, result, command, quick=args.quick, no_docs=args.no_docs, meta=published)
    emit_json(result)
    return 0


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
        f"evaluation every {result['eval_every']} steps; held-out success before RL {result['success_before_rl']:.3f}."
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
                    "" if label == baseline else _ratio_text(against.get(label), bounds.get(label)),
                ]
                for label, times in result["time_to_target_s"].items()
            ],
        )
        body += (
            f"\n\nTimes are interpolated between the evaluations around each crossing; grid error (the largest relative "
            f"width of a reported ratio's bounds) {_grid_text(result)}"
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
        [[label, *(_or_nan(result[key].get(label)) for key in COMPOSITION_KEYS)] for label in seeded],
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


def curve_modes(ks: list[int], in_flight: Sequence[str] = ()) -> list[str]:
    """The modes run over several seeds for time to target: every synchronous mode, k = 1 and 2, and their
    --in-flight variants."""
    seeded = [k for k in ks if k in (1, 2)]
    return [*SYNC_MODES, *(f"async_k{k}" for k in seeded), *(f"async_k{k}_{v}" for v in in_flight for k in seeded)]


def _ratio_text(value: float | None, bounds: list[float | None] | None) -> str:
    if value is None:
        return "n/a (a median run never reached the target)"
    if bounds is None:
        return f"{value:.2f}"
    lo, hi = bounds
    return f"{value:.2f} [{lo:.2f}, {'unbounded' if hi is None else f'{hi:.2f}'}]"


def _grid_text(result: dict[str, Any]) -> str:
    """``grid_error`` in words: a percentage, unbounded, or none when no ratio was reported."""
    value = result["grid_error"]
    if value is not None:
        return f"{value:.1%}"
    return "unbounded" if result["grid_error_over_limit"] else "n/a (no ratio reported)"


def _median_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value
