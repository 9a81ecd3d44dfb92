"""``rollarc bench rose --train``: ROSE timed inside ``rollarc train``, with and without borrowed capacity.

For each seed, the harvest config (``configs/harvest.yaml`` by default) trains twice from one shared SFT warm
start, on the same cluster roles and threads:

- **harvest**: as configured, so the co-serving replicas serve the trace window and are lent to the router
  under the SLO the run derives from its calibration: its first ``calibration_s`` of serving, under the run's own
  training load with nothing lent (``summary.json``: ``harvest_slo``);
- **alone**: ``harvest.lend=false``, the same dedicated capacity and the same co-serving replicas serving the same
  trace (they share this machine's cores, as they would not share a real cluster's), never lent and sent no weights:
  only the borrowing differs. Its serving after its own calibration is the attainment "alone".

The serving trace is ``--trace`` or, when it exists, ``../shared/traces/azure_llm_2023_conv.csv`` beside the
repository (else the config's own, synthetic unless ``harvest.trace_path`` names one). Held-out evaluations
every ``--eval-every`` steps give each run's success curve on its RL wall time (evaluations excluded); the
target is fixed before the runs (``--target``, or ``--target-gain`` above the warm start's held-out success).
Figures (``rollarc.bench.rose_train_figures``): the time-to-target speed-up per seed and its median with the
bounds the evaluation grid leaves on it, trained trajectories per second with over without, serving attainment
with borrowing against without (each against its own run's derived SLO, pooled over seeds), the guard's actions by
cause, and the bytes
that crossed into the borrowed site per step (``metrics.jsonl``'s ``cross_site_bytes``). Read from each run's own
records; a figure a run did not record is ``null``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rollarc.bench.async_runs import run_mode
from rollarc.bench.harness import (
    add_overrides,
    bench_parser,
    command,
    finish,
    median_or_none,
    open_runs,
    quick_or,
    record_load,
    recorded_meta,
    refuse_unnamed_overrides,
    runs_folder,
    seed_count,
)
from rollarc.bench.report_file import REPO_ROOT, markdown_table
from rollarc.bench.rose_bytes import bytes_per_step
from rollarc.bench.rose_train_figures import (
    GOAL_ATTAINMENT_DROP,
    GOAL_SPEEDUP,
    GRID_TOLERANCE,
    SLO_CAUSES,
    goal_met,
    pooled_attainment,
    seed_target,
    slo_actions,
    speedup,
    summed_actions,
)
from rollarc.bench.seed_stats import seed_stats
from rollarc.bench.time_to_target import Crossing, crossing, estimate_noise
from rollarc.config import load_train_config
from rollarc.runtime.entry import initial_policy

CONFIG = "configs/harvest.yaml"
TRACE = REPO_ROOT.parent / "shared" / "traces" / "azure_llm_2023_conv.csv"  # the workspace's, when it is there
DEFAULT_SEEDS = 3
DEFAULT_EVAL_EVERY = 2  # as bench async: a crossing between evaluations 2 steps apart, interpolated
DEFAULT_TARGET_GAIN = 0.10
SETUPS = ("harvest", "alone")
QUICK = [
    "model.preset=nano",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=12",  # the calibration runs during the first steps; borrowing follows it
    "train.warmup_steps=0",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_episodes=4",  # 13 evaluations a run (--eval-every 1): a smoke run's curve, not a measurement
    "train.checkpoint_every=0",
    "tasks.0.env.kwargs.size=4",
    "tasks.0.agent.max_turns=8",
    "harvest.replicas=1",
    "harvest.replay.time_scale=4",  # the trace 4x faster: a short calibration still holds a few requests
    "harvest.calibration_s=1.5",  # the calibration: a short sample (5 requests of the Azure trace), for a smoke run
    "harvest.calibration_min_requests=3",
    "harvest.lend_after_s=0",  # short steps: lend at the first report of headroom
    "harvest.slo_alone_factor=20",  # a few requests' p99 of a few ms: 1.5x that admits no rollout step of a smoke run
]


def setup_overrides(setup: str, seed: int) -> list[str]:
    """What one run adds to the shared overrides: ``harvest.lend=false`` for the run alone, and its seed."""
    return [*(["harvest.lend=false"] if setup == "alone" else []), f"seed={seed}"]


def default_trace(flag: str | None, workspace: Path = TRACE) -> str | None:
    """The trace the harvest runs replay: ``--trace``, else the workspace's Azure conversation trace if present."""
    if flag is not None:
        return str(Path(flag).expanduser().resolve())
    return str(workspace) if workspace.is_file() else None


def harvest_records(run_dir: Path) -> dict[str, Any]:
    """What a run recorded about borrowed capacity: the derived SLO, serving during training, the guard's
    actions by cause (``summary.json``), the turns the co-serving replicas ran and the bytes per step
    (``metrics.jsonl``). Absent from a run without ``harvest:`` (or before it recorded them): ``None``."""
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    try:
        sent: dict[str, float] | None = bytes_per_step(rows)
    except ValueError:  # no harvest: keys in the rows (the run alone)
        sent = None
    return {
        "slo": summary.get("harvest_slo"),
        "serving": summary.get("harvest_serving"),
        "guard_actions": summary.get("harvest_guard_actions"),
        "borrowed_turns": int(rows[-1].get("harvest_turns_done", 0)) if rows else 0,
        "bytes": sent,
        "wall_s": float(summary["wall_s"]),
    }


def _attainment_pair(part: dict[str, Any] | None) -> tuple[int, float] | None:
    """``(requests, attainment)`` of a ``harvest_serving`` or ``harvest_slo.alone`` record."""
    if not part or part.get("requests") is None or part.get("attainment") is None:
        return None
    return int(part["requests"]), float(part["attainment"])


def seed_row(seed: int, runs: dict[str, dict[str, Any]], target: float) -> dict[str, Any]:
    """One seed's figures from its two runs (``read_run`` plus ``harvest_records`` of each)."""
    crossings = {setup: crossing(runs[setup]["curve"], target) for setup in SETUPS}
    ratio = speedup([crossings["alone"]], [crossings["harvest"]])
    h = runs["harvest"]["records"]
    alone_rate = runs["alone"]["trajectories_per_s"]
    return {
        "seed": seed,
        "target_success": target,
        **{
            setup: {
                "time_to_target_s": None if (c := crossings[setup]) is None else c.t,  # interpolated
                "time_to_target_grid_s": None if c is None else [c.lo, c.hi],  # the evaluations around it
                "rl_wall_s": runs[setup]["rl_wall_s"],
                "wall_s": runs[setup]["records"]["wall_s"],
                "trajectories_per_s": runs[setup]["trajectories_per_s"],
                "success_before": runs[setup]["success_before"],
                "success_after": runs[setup]["success"],
                "borrowed_turns": runs[setup]["records"]["borrowed_turns"],
                "curve": [list(point) for point in runs[setup]["curve"]],
            }
            for setup in SETUPS
        },
        "speedup_to_target": ratio["speedup"],
        "speedup_grid_bound": [ratio["low"], ratio["high"]],
        "trained_traj_s_ratio": runs["harvest"]["trajectories_per_s"] / alone_rate if alone_rate > 0 else None,
        "slo": h["slo"],
        "serving": h["serving"],
        "slo_alone": runs["alone"]["records"]["slo"],
        "serving_alone": runs["alone"]["records"]["serving"],
        "slo_attainment_alone": (_attainment_pair(runs["alone"]["records"]["serving"]) or (None, None))[1],
        "slo_attainment_training": (_attainment_pair(h["serving"]) or (None, None))[1],
        "guard_actions": h["guard_actions"],
        "cross_site_bytes_per_step": None if h["bytes"] is None else h["bytes"]["cross_site_bytes_per_step"],
        "in_site_bytes_per_step": None if h["bytes"] is None else h["bytes"]["in_site_bytes_per_step"],
        "full_copy_bytes": None if h["bytes"] is None else h["bytes"]["full_copy_bytes"],
    }


def _crossing(run: dict[str, Any]) -> Crossing | None:
    """A run's crossing back from its row (``seed_row``): the interpolated time and the grid around it."""
    if run["time_to_target_s"] is None:
        return None
    lo, hi = run["time_to_target_grid_s"]
    return Crossing(run["time_to_target_s"], lo, hi, 0)


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON's headline keys over the seeds' rows."""
    crossings = {setup: [_crossing(r[setup]) for r in rows] for setup in SETUPS}
    grid = speedup(crossings["alone"], crossings["harvest"])
    per_seed_actions = [r["guard_actions"] for r in rows]
    summed = summed_actions(per_seed_actions)
    slos = [r["slo"] for r in rows]
    alone = pooled_attainment([_attainment_pair(r["serving_alone"]) for r in rows])
    training = pooled_attainment([_attainment_pair(r["serving"]) for r in rows])
    caused = slo_actions(summed)
    stats = seed_stats([r["speedup_to_target"] for r in rows])
    return {
        # median time alone / median time with harvest (a seed that missed counts as never); null if a median missed
        "speedup_to_target_harvest": {**stats, "median": grid["speedup"]},
        "speedup_to_target_grid_bound": grid,
        "trained_traj_s_ratio": seed_stats([r["trained_traj_s_ratio"] for r in rows]),
        "slo_attainment_alone": alone,
        "slo_attainment_training": training,
        "guard_actions": {"per_seed": per_seed_actions, "summed": summed, "slo_caused": caused},
        "cross_site_bytes_per_step": seed_stats([r["cross_site_bytes_per_step"] for r in rows]),
        "in_site_bytes_per_step": seed_stats([r["in_site_bytes_per_step"] for r in rows]),
        "full_copy_bytes": median_or_none([r["full_copy_bytes"] for r in rows]),
        "slo": {
            "per_seed": slos,
            "ttft_p99_ms": median_or_none([(s or {}).get("ttft_p99_ms") for s in slos]),
            "tpot_p99_ms": median_or_none([(s or {}).get("tpot_p99_ms") for s in slos]),
        },
        "borrowed_turns": {setup: [r[setup]["borrowed_turns"] for r in rows] for setup in SETUPS},
        "goal": {
            "speedup_to_target_min": GOAL_SPEEDUP,
            "slo_caused_guard_actions_min": 1,
            "slo_caused_causes": list(SLO_CAUSES),
            "attainment_drop_max": GOAL_ATTAINMENT_DROP,
            "grid_tolerance": GRID_TOLERANCE,
        },
        "goal_met": goal_met(grid["speedup"], caused, alone, training),
    }


def docs_body(result: dict[str, Any]) -> str:
    def num(value: float | None, fmt: str = ".2f") -> str:
        return "—" if value is None else format(value, fmt)

    rows = [
        [
            r["seed"],
            num(r["alone"]["time_to_target_s"], ".1f"),
            num(r["harvest"]["time_to_target_s"], ".1f"),
            f"{num(r['speedup_to_target'])} ({num(r['speedup_grid_bound'][0])}–{num(r['speedup_grid_bound'][1])})",
            f"{r['alone']['rl_wall_s']:.1f} / {r['harvest']['rl_wall_s']:.1f}",
            num(r["trained_traj_s_ratio"]),
            f"{num(r['slo_attainment_alone'], '.3f')} / {num(r['slo_attainment_training'], '.3f')}",
            "—" if r["guard_actions"] is None else ", ".join(f"{k} {v}" for k, v in r["guard_actions"].items()),
            r["harvest"]["borrowed_turns"],
            num(None if r["cross_site_bytes_per_step"] is None else r["cross_site_bytes_per_step"] / 1e6),
        ]
        for r in result["per_seed"]
    ]
    table = markdown_table(
        [
            "seed",
            "time to target s alone",
            "with harvest",
            "speed-up (grid bound)",
            "RL wall s alone / harvest",
            "trained traj/s ratio",
            "attainment alone / training",
            "guard actions",
            "borrowed turns",
            "cross-site MB/step",
        ],
        rows,
    )
    s = result["speedup_to_target_harvest"]
    return (
        f"{table}\n\nTarget: held-out success {result['target']['description']}; SLO (derived per run, median) TTFT "
        f"p99 {num(result['slo']['ttft_p99_ms'], '.1f')} ms, TPOT p99 {num(result['slo']['tpot_p99_ms'], '.1f')} ms. "
        f"Median speed-up to target {num(s['median'])}, goal {'met' if result['goal_met'] else 'not met'}. "
        "See docs/rose.md#timed-inside-rollarc-train.\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The common flags (harness) and the target, trace and evaluation grid."""
    parser = bench_parser(
        "bench rose --train",
        __doc__,
        quick="nano model, 12 steps, one seed: a smoke run",
        config=CONFIG,
        config_help="a training config with a harvest: section",
        seeds=f"seeds (default {DEFAULT_SEEDS}; quick: 1)",
        runs="where the runs go; finished runs there are reused",
        publish_as="rose_train",
    )
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: the config's)")
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help=f"held-out evaluation every N steps (default {DEFAULT_EVAL_EVERY}; quick: 1)",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--target", type=float, default=None, help="held-out success every run is timed to")
    target.add_argument(
        "--target-gain",
        type=float,
        default=DEFAULT_TARGET_GAIN,
        help="target = the warm start's held-out success + this (default %(default)s; ignored with --target)",
    )
    parser.add_argument("--trace", default=None, help=f"serving trace CSV (default: {TRACE.name} beside the repo)")
    add_overrides(parser)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    seeds = seed_count(parser, args, DEFAULT_SEEDS)
    eval_every = quick_or(args.eval_every, args.quick, DEFAULT_EVAL_EVERY, 1)
    if eval_every < 1:
        parser.error(f"--eval-every {eval_every}: evaluate at least every step count >= 1")
    refuse_unnamed_overrides(parser, args, "rose_train")
    if load_train_config(args.config, args.overrides).harvest is None:  # before QUICK's harvest.* keys add one
        parser.error(f"--config {args.config} has no harvest: section: nothing to borrow (see configs/harvest.yaml)")
    trace = default_trace(args.trace)
    overrides = [*(QUICK if args.quick else []), *args.overrides, f"train.eval_every={eval_every}"]
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    if trace is not None:
        overrides.append(f"harvest.trace_path={trace}")
    runs = runs_folder(args.runs, "rose-train")
    overrides.append(f"sft.checkpoint={runs / 'sft'}")  # one warm start, shared by every run
    base = load_train_config(args.config, overrides)
    policy, _ = initial_policy(base)  # trained once, before any timing
    overrides.append(f"model.path={policy}")
    meta = open_runs(parser, runs, overrides)
    results = [run_pair(args.config, overrides, base.seed, i, runs, meta) for i in range(seeds)]
    record_load(runs, meta)
    start = results[0]["alone"]["success_before"]
    target_success = seed_target(start, args.target, args.target_gain)
    rows = [seed_row(base.seed + i, pair, target_success) for i, pair in enumerate(results)]
    episodes = base.train.eval_episodes
    result: dict[str, Any] = {
        **combine(rows),
        "target": {
            "success": target_success,
            "given": args.target,
            "gain": None if args.target is not None else args.target_gain,
            "start_success": start,
            "noise": estimate_noise(start, episodes) if episodes > 0 and 0.0 <= start <= 1.0 else None,
            "description": f"{target_success:.3f}"
            + ("" if args.target is not None else f" (warm start {start:.3f} + {args.target_gain:g})"),
        },
        "per_seed": rows,
        "seeds": seeds,
        "steps": base.train.steps,
        "eval_every": eval_every,
        "heldout_episodes": episodes,
        "config": args.config,
        "trace": Path(trace).name if trace is not None else "synthetic",
        "commit": meta.get("commit"),
        "machine_load": meta.get("machine_load"),
    }
    cmd = command("rose", ["--train", *argv])
    return finish(args.publish_as, docs_body(result), result, cmd, args, recorded_meta(meta))


def run_pair(
    config: str, overrides: list[str], seed0: int, i: int, runs: Path, meta: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Seed ``seed0 + i`` with and without harvest, alternating which goes first (drift falls on both)."""
    seed = seed0 + i
    pair: dict[str, dict[str, Any]] = {}
    for setup in SETUPS if i % 2 == 0 else SETUPS[::-1]:
        print(f"== seed {seed}: {setup}", flush=True)
        run = run_mode(config, [*overrides, *setup_overrides(setup, seed)], f"{setup}_s{i}", runs, meta)
        pair[setup] = {**run, "records": harvest_records(Path(run["run_dir"]))}
        print(f"   RL {run['rl_wall_s']:.1f} s, {run['trajectories_per_s']:.2f} traj/s, success {run['success']:.3f}")
    return pair
