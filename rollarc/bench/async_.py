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

The module holds the command (its flags, their checks, and the order of the steps); the modes are in
``async_modes``, the runs in ``async_runs``, time to target in ``async_target`` and the published block in
``async_report``; the common scaffolding (flags, ``--runs`` roots, publication) is :mod:`rollarc.bench.harness`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollarc.bench import runs_root
from rollarc.bench.async_modes import (
    IN_FLIGHT,
    SYNC_MODES,
    curve_modes,
    mode_setup,
    modes,
    no_correction,
    no_latency,
    quick_overrides,
    whole_machine,
    workload,
)
from rollarc.bench.async_report import grid_text, report, throughput
from rollarc.bench.async_runs import META_FILE, reread_runs, train_runs
from rollarc.bench.async_runs import run_mode as run_mode  # re-exported: rollarc bench step and rose --train
from rollarc.bench.async_target import DEFAULT_EVAL_EVERY, GRID_ERROR_LIMIT, fixed_target, time_to_target
from rollarc.bench.harness import (
    RUNS_HELP,
    add_overrides,
    bench_parser,
    command,
    finish,
    median_or_none,
    open_runs,
    quick_or,
    record_load,
    recorded_meta,
    runs_folder,
    seed_count,
)
from rollarc.bench.time_to_target import estimate_noise, select_target
from rollarc.bench.trained_composition import bench_run_dirs as bench_run_dirs  # re-exported (docs/async.md)
from rollarc.bench.trained_composition import composition_of_runs as composition_of_runs  # re-exported
from rollarc.bench.trained_composition import trained_composition as trained_composition  # re-exported
from rollarc.config import Config, load_train_config
from rollarc.runtime.entry import initial_policy

DEFAULT_CONFIG = "configs/longtail.yaml"
# Runs per mode: two seeds could not separate an effect of k from run-to-run noise (docs/async.md#measured);
# three give a median that one bad seed cannot decide.
DEFAULT_SEEDS = 3


def build_parser() -> argparse.ArgumentParser:
    """The common flags (harness) and this benchmark's own: the modes, the target, the runs root."""
    parser = bench_parser(
        "bench async",
        __doc__,
        quick="a tiny smoke run (nano model, 2 steps, one seed)",
        config=DEFAULT_CONFIG,
        seeds=f"runs (config seeds) of each synchronous mode, k=1 and k=2 for time to target (default {DEFAULT_SEEDS})",
        runs=RUNS_HELP,
        publish_as="",
        publish_help="the name its block and JSON are published under (default async; with --no-latency "
        "async_nolatency); a variant or another --config must name its own (e.g. --config configs/gentail.yaml "
        "--publish-as async_gentail)",
    )
    add = parser.add_argument
    add("--steps", type=int, default=None, help="training steps per mode (default: the config's)")
    add("--ks", default="1,2,4", help="staleness bounds of the async modes")
    add(
        "--eval-every",
        type=int,
        default=None,
        help=f"held-out evaluation every N steps (default {DEFAULT_EVAL_EVERY}, keeping the grid error under "
        f"{100 * GRID_ERROR_LIMIT:.0f} %% on configs/longtail.yaml; quick: 1)",
    )
    add(
        "--eval-deferred",
        action="store_true",
        help="every mode scores its periodic evaluations from snapshots after the run instead of pausing between "
        "steps (train.eval_deferred=true; docs/async.md#evaluations-off-the-critical-path)",
    )
    add("--target", type=float, default=None, help="the held-out success to reach, fixed before the runs")
    add(
        "--target-from",
        default=None,
        metavar="JSON",
        help="take the target from an earlier run's published JSON (its 'target' or 'target_success')",
    )
    add(
        "--target-fraction",
        type=float,
        default=0.8,
        help="only without --target/--target-from (a fallback, labelled in the JSON): target = success before RL + "
        "this fraction of the lowest synchronous seed's gain, chosen after the runs",
    )
    add(
        "--monolithic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the monolithic mode (whole machine per phase, the config's correction) over every seed",
    )
    add(
        "--split-sync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the sync mode with the config's own placement and correction (the earlier baseline)",
    )
    add(
        "--no-latency",
        action="store_true",
        help="every task's env latency off (published as async_nolatency unless --publish-as says otherwise)",
    )
    add(
        "--in-flight",
        default="",
        help="also run each async mode with these async.in_flight_update values, comma-separated (e.g. abort): "
        "modes async_kK_VALUE, over as many seeds as k",
    )
    add(
        "--from-runs",
        default=None,
        metavar="ROOT",
        help="train nothing: publish again from the finished runs of an earlier --runs ROOT and its bench_meta.json",
    )
    add(
        "--export-to",
        default=None,
        metavar="DEST",
        help="train nothing: copy the --runs ROOT's record, finished runs (no timelines) and warm start to DEST, "
        "to be copied back to ROOT in a later sitting (runs_root.py)",
    )
    add_overrides(parser, "every mode")
    return parser


@dataclass
class Plan:
    """What the checked flags ask for."""

    seeds: int
    target: float | None
    target_source: str
    ks: list[int]
    in_flight: list[str]
    publish_as: str


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Plan:
    """The flags' checks, each refusal one line naming the flag; the plan they make."""
    seeds = seed_count(parser, args, DEFAULT_SEEDS)
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
    if not args.publish_as and not (args.no_docs or args.quick):
        if in_flight:
            parser.error("--in-flight needs --publish-as NAME (the headline figures are 'async')")
        if Path(args.config) != Path(DEFAULT_CONFIG):
            parser.error(
                f"--config {args.config} needs --publish-as NAME (the headline figures are {DEFAULT_CONFIG}'s)"
            )
    return Plan(seeds, target, target_source, ks, in_flight, publish_as)


def export(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--export-to DEST``: copy the ``--runs`` root's record and finished runs (runs_root.py)."""
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


def run_overrides(args: argparse.Namespace, plain: Config) -> list[str]:
    """The overrides every mode gets: the quick shrink, the user's, latency off, steps and the evaluation grid."""
    overrides = [*(quick_overrides(plain) if args.quick else []), *args.overrides]
    if args.no_latency:
        overrides += no_latency(plain)
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    overrides.append(f"train.eval_every={quick_or(args.eval_every, args.quick, DEFAULT_EVAL_EVERY, 1)}")
    if args.eval_deferred:
        overrides.append("train.eval_deferred=true")
    return overrides


def root_record(parser: argparse.ArgumentParser, runs: Path) -> dict[str, Any]:
    """``--from-runs ROOT``'s record (its commit, overrides, machine load)."""
    if not (runs / META_FILE).is_file():
        parser.error(f"--from-runs {runs}: no {META_FILE} there (only a measured run writes one)")
    meta: dict[str, Any] = json.loads((runs / META_FILE).read_text())
    return meta


def from_runs_command(args: argparse.Namespace, runs: Path, plan: Plan) -> str:
    """The command recorded for figures published again from a root."""
    cmd = f"rollarc bench async --from-runs {runs.name}"
    if plan.in_flight:
        cmd += f" --ks {args.ks} --in-flight {args.in_flight} --publish-as {plan.publish_as}"
    for flag, value in (("--target", args.target), ("--target-from", args.target_from)):
        cmd += "" if value is None else f" {flag} {value}"
    return cmd


def fallback_target(
    start: float, seeded: dict[str, list[dict[str, Any]]], fraction: float, quick: bool
) -> tuple[float | None, str]:
    """Without a fixed target: one chosen after the runs from the synchronous curves, labelled as such."""
    sync_curves = [r["curve"] for label, of in seeded.items() if label in SYNC_MODES for r in of]
    target = select_target(start, sync_curves, fraction)
    source = (
        f"fallback, chosen after the runs: success before RL + {fraction:g} x the lowest synchronous "
        "seed's best gain (pass --target to fix it before the runs)"
    )
    if not quick:
        print(f"warning: no --target: the target was {source}", flush=True)
    return target, source


def assemble(
    args: argparse.Namespace,
    base: Config,
    setups: dict[str, Any],
    results: dict[str, dict[str, Any]],
    seeded: dict[str, list[dict[str, Any]]],
    to_target: dict[str, Any],
    latency_off: bool,
    runs: Path,
    ks: list[int],
    seeds: int,
) -> dict[str, Any]:
    """The JSON line: every mode's throughput and success, time to target, what was trained, the curves."""
    start = next(iter(results.values()))["success_before"]  # every mode starts from the same warm start
    episodes = base.train.eval_episodes
    noise = estimate_noise(start, episodes)
    target = to_target["target"]
    target_gain = None if target is None else target - start
    return {
        "workload": workload(args.config, base, latency_off),
        "mode_setup": {label: setups[label] for label in results if label in setups},
        **throughput(results, ks),
        "success": {label: r["success"] for label, r in results.items()},
        "success_before_rl": start,
        "steps": base.train.steps,
        "eval_every": base.train.eval_every,
        "eval_deferred": base.train.eval_deferred,  # periodic evaluations scored from snapshots, not pausing steps
        "trajectories_per_step": base.train.groups_per_step * base.train.group_size,
        "seeds": seeds,
        **to_target,
        "heldout_episodes": episodes,
        "target_noise": noise,  # two standard errors of the start's held-out estimate
        "target_outside_noise": target_gain is not None and target_gain > noise,
        # per mode, median over seeds: how much shorter a step right after an evaluation was than the others
        # (seconds): work done during the evaluation's pause, which RL wall time leaves out (time_to_target.py)
        "eval_pause_gain_s": {
            label: median_or_none([r["eval_pause_gain_s"] for r in of]) for label, of in seeded.items()
        },
        **composition_of_runs(bench_run_dirs(runs, modes=list(seeded))),
        # per mode, per seed: [RL seconds, held-out success] at each evaluation (docs/async.md#measured)
        "curves": {label: [[list(point) for point in r["curve"]] for r in of] for label, of in seeded.items()},
    }


def warn_grid(to_target: dict[str, Any]) -> None:
    """The evaluation grid alone could move a reported ratio more than the limit: say so."""
    if to_target["grid_error_over_limit"]:
        print(
            f"warning: grid error {grid_text(to_target)} exceeds {GRID_ERROR_LIMIT:.0%}: the evaluation "
            "grid alone could move a reported ratio that much; evaluate more often (--eval-every)",
            flush=True,
        )


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.export_to:
        return export(parser, args)
    plan = check(parser, args)
    plain = load_train_config(args.config, args.overrides)
    overrides = run_overrides(args, plain)
    meta: dict[str, Any] = {}
    if args.from_runs:
        runs = Path(args.from_runs)
        meta = root_record(parser, runs)
        # the overrides the runs had (their steps, evaluation grid, latency), not this invocation's
        overrides = [o for o in meta.get("overrides", overrides) if not o.startswith("model.path=")]
    base = load_train_config(args.config, overrides)
    mode_list = modes(
        plan.ks, args.monolithic, plan.in_flight, whole_machine(base), no_correction(base), args.split_sync
    )
    setups = {label: mode_setup(load_train_config(args.config, [*overrides, *o])) for label, o in mode_list}
    latency_off = set(no_latency(plain)) <= set(overrides)
    if args.from_runs:
        results, seeded, seeds = reread_runs(runs, plan.ks, plan.in_flight)
        cmd = from_runs_command(args, runs, plan)
    else:
        policy, _ = initial_policy(base)  # train the shared SFT warm start once, before any timing
        overrides.append(f"model.path={policy}")
        base = load_train_config(args.config, overrides)
        runs = runs_folder(args.runs, "async")
        meta = open_runs(parser, runs, overrides)
        seeded_modes = curve_modes(plan.ks, plan.in_flight)
        results, seeded = train_runs(args.config, overrides, mode_list, seeded_modes, plan.seeds, base.seed, runs, meta)
        record_load(runs, meta)
        seeds, cmd = plan.seeds, command("async", argv)
    start = next(iter(results.values()))["success_before"]
    target, source = plan.target, plan.target_source
    if target is None:
        target, source = fallback_target(start, seeded, args.target_fraction, args.quick)
    to_target = time_to_target(seeded, target, source)
    warn_grid(to_target)
    result = assemble(args, base, setups, results, seeded, to_target, latency_off, runs, plan.ks, seeds)
    body = report(result, results, base.train.steps, seeded)
    return finish(plan.publish_as, body, result, cmd, args, recorded_meta(meta, ("commit", "machine_load", "sessions")))
