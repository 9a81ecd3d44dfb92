"""``rollarc bench spot``: spot capacity that vanishes: pull vs push under preemption, SP recovery, cost.

1. **Pull vs push, measured on Ray** (``pull_vs_push_measured``, ``rollarc.bench.spot_ray``): the pull
   fleet and a push baseline on the same Ray actors under the same preemption trace (the config's
   ``spot.trace``), ``--ray-jobs`` jobs of ``--ray-steps`` denoising steps, wall-clock jobs per second,
   lost and redone jobs; ``throughput_ratio_pull_vs_push`` is this measured ratio. ``--ray-set KEY=VALUE``
   overrides the config of this part only (more slots, a drawn preemption rate: ``ray_config``).
1b. **Throughput and work lost under preemption, predicted** (none, low, high rates) for the pull scheduler with
   in-flight commit against a push baseline that deals jobs out statically and restarts a lost job from
   step 0 (``rollarc.spotlight.fleet_sim``: the real job queue, one tick per denoising step). The tick is
   converted to seconds with the time of one SDE step of a job measured on the real DiT here. Every
   preemption at the low and high rates is run twice: with a notice of ``--notice-steps`` steps and with
   none (the lease then expires). ``lost_jobs`` and ``duplicate_jobs`` are totals over every pull run, of
   the model and of the measured Ray run. The model's ratio at the high rate is a prediction, named
   ``throughput_ratio_pull_vs_push_high_modelled``.
2. **SP recovery** (``rollarc.bench.spot_sp``): an elastic Ulysses group of ``--sp`` Ray actors, each on a node
   of its own of a local multi-node cluster, loses a member's node ``--sp-rounds`` times; the time to the next
   successful forward pass by elastic regroup (survivors keep their weights) against a warm restart at the same
   degree (the same processes reload the weights from disk and form a new group): ``recovery_speedup``. The
   cold restart (new actors) is reported too, labelled ``recovery_s_cold``.
2b. **SP recovery inside a training run** (``rollarc.bench.spot_train``, ``--train-config``, default
   ``configs/t2i_spot_sp.yaml``): the regroups and cold starts of the explorers' SP groups as ``rollarc train``
   timed them under the config's preemption trace; ``recovery_speedup_training`` is their medians' ratio.
   ``--train-config ''`` skips it; ``--quick`` runs it with a tiny model for a few steps.
3. **Cost**: exploration on spot nodes under the low rate against on-demand exploration, for the roles
   of ``--config``; spot and on-demand prices of ``--price-kind`` from the hardware catalogue. The spot
   run is slowed by the pull scheduler's measured makespan ratio at the low rate (with no notice, the
   worse case), charged to the whole run (exploration assumed on the critical path). At cluster scale
   (``cluster_scale``), ``rollarc.sim.spot`` runs ``--cluster-explorers`` spot GPUs for 24 h under each
   AWS interruption-frequency band (and a stress rate of one per node-hour), with a 2-minute notice and
   with none, next to ``--cluster-on-demand`` on-demand GPUs.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from rollarc.bench.harness import bench_parser, finish
from rollarc.bench.report_file import markdown_table
from rollarc.bench.spot_ray import pull_vs_push_measured
from rollarc.bench.spot_sp import sp_recovery
from rollarc.bench.spot_train import train_and_time_recovery
from rollarc.cluster.catalogue import load_catalogue
from rollarc.diffusion.config import T2IConfig, load_t2i_config
from rollarc.diffusion.model import build_policy
from rollarc.diffusion.resumable import advance, start
from rollarc.rayproc.placement import CATALOGUE
from rollarc.sim.spot import cost_ratio, monthly_to_hourly, simulate_fleet
from rollarc.spotlight.fleet_sim import FleetResult, run_pull, run_push
from rollarc.spotlight.preemption import at_rate

VOCAB = ["one", "red", "square", "left", "two", "blue"]
# Preemptions per node per 1000 denoising steps (a tick-level scale: the fleet model runs in steps).
RATES = {"none": 0.0, "low": 2.0, "high": 10.0}


def measure_step_s(width: int, layers: int, heads: int, seeds: int) -> float:
    """Seconds of one SDE step of one job (a prompt's ``seeds`` candidates) on the DiT, best of 3."""
    policy = build_policy(VOCAB, 16, width, layers, heads, seed=0).eval()
    best = float("inf")
    for _ in range(3):
        state = start(policy, ["one red square left"] * seeds, list(range(seeds)), 8, 0.7, 0)
        t0 = time.perf_counter()
        advance(policy, state, 4)
        best = min(best, (time.perf_counter() - t0) / 4)
    return best


def fleet_runs(
    jobs: int, steps: int, slots: int, notice: int, replacement: int, lease: int, seed: int
) -> dict[str, Any]:
    horizon = 100 * jobs * steps
    out: dict[str, Any] = {}
    for name, per_1000 in RATES.items():
        for label, notice_steps in (("notice", notice), ("no_notice", 0)):
            if name == "none" and label == "no_notice":
                continue
            schedule = at_rate(
                per_1000 * 3.6, slots, horizon, notice_steps, replacement, seed
            )  # per-hour API, 1 tick = 1 s
            pull = run_pull(jobs, steps, slots, schedule, replacement, lease, horizon)
            push = run_push(jobs, steps, slots, schedule, replacement, horizon)
            out[name if name == "none" else f"{name}_{label}"] = {"pull": pull, "push": push}
    return out


# AWS Spot Instance Advisor interruption-frequency bands (upper edges, per month); "stress" is one per node-hour.
BANDS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, "stress": None}


def cluster_scale(explorers: int, on_demand: int, step_s: float, job_steps: int, spot_factor: float) -> dict[str, Any]:
    """The simulator's spot scenario: cost ratio per published band, with AWS's 2-minute notice and with none."""
    out: dict[str, Any] = {}
    for band, monthly in BANDS.items():
        rate = 1.0 if monthly is None else monthly_to_hourly(monthly)
        for label, notice in (("notice_120s", 120.0), ("no_notice", 0.0)):
            fleet = simulate_fleet(explorers, 24.0, rate, notice, 300.0, step_s, job_steps, 30.0, seed=0)
            out[f"{band} {label}"] = {
                "preemptions": fleet.preemptions,
                "useful_fraction": fleet.useful_fraction,
                "cost_ratio": cost_ratio(on_demand, explorers, spot_factor, fleet),
            }
    return out


def _row(name: str, pull: FleetResult, push: FleetResult, step_s: float) -> list[Any]:
    return [
        name,
        pull.throughput() / step_s,
        push.throughput() / step_s,
        pull.throughput() / push.throughput(),
        pull.lost_steps,
        push.lost_steps,
        pull.lost_jobs,
        pull.duplicates,
    ]


# --quick: the training run of part 2b on a tiny DiT for a few steps (what the code path needs, not a figure)
QUICK_TRAIN = [
    "pretrain.steps=2",
    "pretrain.batch_size=8",
    "model.width=16",
    "model.layers=1",
    "model.heads=2",
    "train.steps=2",
    "train.prompts_per_step=2",
    "train.group_size=2",
    "train.sample_steps=2",
    "train.eval_steps=3",
    "train.eval_every=1",
    "train.eval_prompts=2",
    "explore.candidates=4",
    "cluster.pools.spot.count=1",
    "spot.replacement_s=0.0",
]


def quick_training(tmp: Path) -> list[str]:
    """Overrides of part 2b's run for ``--quick``: a tiny DiT, and one noticed preemption at once, so that a
    two-step run regroups at least once."""
    trace = tmp / "trace.yaml"
    trace.write_text("preemptions:\n  - {at_s: 0.0, slot: 0, notice_s: 1.0}\n")
    return [*QUICK_TRAIN, f"pretrain.checkpoint={tmp / 'base'}", f"spot.trace={trace}", "spot.target=slot"]


def _training_sentence(in_training: dict[str, Any] | None, config: str) -> str:
    if in_training is None:
        return ""
    regroups, colds = in_training["regroup_s"], in_training["cold_start_s"]
    ratio = in_training["recovery_speedup"]
    return (
        f"Inside `rollarc train {config}` (SP degree {in_training['sp_degree']}, {in_training['preemptions']} "
        f"preemptions): {len(regroups)} regroups ({', '.join(f'{s:.3f}' for s in regroups) or 'none'} s) against "
        f"{len(colds)} cold starts of an SP group ({', '.join(f'{s:.2f}' for s in colds) or 'none'} s): "
        f"{'no ratio (a regroup or a cold start is missing)' if ratio is None else f'{ratio:.1f}× (medians)'}; "
        f"lost {in_training['lost_jobs']}, duplicated {in_training['duplicate_jobs']} jobs. "
    )


def _overrides(measured: dict[str, Any]) -> str:
    """``--ray-set``'s overrides as a clause of the measured sentence (empty without any)."""
    return f", config overrides {' '.join(measured['overrides'])}" if measured.get("overrides") else ""


def _accounting_sentence(measured: dict[str, Any]) -> str:
    """Where each mode's slot-seconds went (``spot_ray.time_accounting``), as one sentence of the block."""

    def part(mode: str) -> str:
        a = measured[mode]["time_accounting"]
        return (
            f"{mode} {a['slot_s']:.1f}: busy {a['busy_slot_s']:.1f} (median job {1000 * a['job_s_median']:.0f} ms), "
            f"down {a['down_slot_s']:.1f}, idle at the end {a['tail_idle_slot_s']:.1f}, other {a['other_slot_s']:.1f}"
        )

    return f"Slot-seconds, {part('pull')}; {part('push')}."


def ray_config(config: str, overrides: list[str]) -> T2IConfig:
    """The config of the measured pull vs push run: ``config`` with ``--ray-set``'s overrides.

    The config's own trace (4 preemptions in the first 34 s, two per slot of two) ends early in a long run and
    hits both slots alike, which leaves push's static plan nothing to lose; measuring where pull should win
    takes more slots, each with a core of its own, and preemptions throughout (docs/spot.md#rollarc-bench-spot)."""
    return load_t2i_config(config, overrides)


def _parser() -> argparse.ArgumentParser:
    parser = bench_parser(
        "bench spot",
        __doc__,
        quick="fewer jobs, one SP node loss on a tiny DiT (a few minutes)",
        config="configs/t2i_spot.yaml",
        config_help="t2i config: model size, roles, pools",
    )
    parser.add_argument("--sp", type=int, default=3, help="SP group size before each loss (one member lost)")
    parser.add_argument("--sp-rounds", type=int, default=3, help="node losses of the SP group (--quick: 1)")
    parser.add_argument("--sp-heads", type=int, default=6, help="attention heads of the SP part's DiT")
    parser.add_argument("--sp-width", type=int, default=96, help="hidden size of the SP part's DiT (--quick: 24)")
    parser.add_argument(
        "--sp-image-size", type=int, default=24, help="image size of the SP part's DiT (--quick: 12; patch 2)"
    )
    parser.add_argument("--slots", type=int, default=8, help="spot workers in the fleet model")
    parser.add_argument("--notice-steps", type=int, default=3, help="preemption notice, in denoising steps")
    parser.add_argument("--price-kind", default="h800", help="catalogue device that prices every pool unit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray-jobs", type=int, default=48, help="jobs of the measured pull vs push run (--quick: 16)")
    parser.add_argument(
        "--ray-steps", type=int, default=16, help="denoising steps per job of the measured pull vs push run"
    )
    parser.add_argument(
        "--ray-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the measured pull vs push run only (repeatable), e.g. "
        "cluster.pools.spot.count=6 spot.trace=null spot.rate_per_hour=240: more slots (one core each at least), "
        "preemptions all run long",
    )
    parser.add_argument("--cluster-explorers", type=int, default=48, help="simulated spot explorer GPUs")
    parser.add_argument(
        "--cluster-on-demand", type=int, default=16, help="simulated on-demand GPUs (trainer, samplers)"
    )
    parser.add_argument(
        "--cluster-step-s", type=float, default=0.5, help="assumed seconds per denoising step of a job at cluster scale"
    )
    parser.add_argument(
        "--train-config",
        default="configs/t2i_spot_sp.yaml",
        help="t2i spot config with cluster.sp_degree > 1 whose training run times SP recovery ('' skips it)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    cfg = load_t2i_config(args.config)
    mc, tc = cfg.model, cfg.train
    torch.set_num_threads(mc.threads)
    step_s = measure_step_s(mc.width, mc.layers, mc.heads, cfg.explore.candidates)
    jobs = 200 if args.quick else 1000
    runs = fleet_runs(jobs, tc.sample_steps, args.slots, args.notice_steps, 2 * tc.sample_steps, 2, args.seed)
    with tempfile.TemporaryDirectory(prefix="rollarc-bench-spot-") as tmp:
        sp = sp_recovery(
            args.sp,
            1 if args.quick else args.sp_rounds,
            24 if args.quick else args.sp_width,
            1 if args.quick else mc.layers,
            args.sp_heads,
            12 if args.quick else args.sp_image_size,
            mc.threads,
            Path(tmp),
        )
    with tempfile.TemporaryDirectory(prefix="rollarc-bench-spot-ray-") as tmp:
        ray_jobs = 16 if args.quick else args.ray_jobs
        measured = pull_vs_push_measured(ray_config(args.config, args.ray_set), Path(tmp), ray_jobs, args.ray_steps)
        measured["overrides"] = list(args.ray_set)
    in_training = None
    if args.train_config:
        with tempfile.TemporaryDirectory(prefix="rollarc-bench-spot-train-") as tmp:
            in_training = train_and_time_recovery(
                args.train_config, Path(tmp) / "runs", quick_training(Path(tmp)) if args.quick else []
            )
    slowdown = runs["low_no_notice"]["pull"].ticks / runs["none"]["pull"].ticks
    result = _result(args, cfg, runs, measured, sp, in_training, step_s, jobs, slowdown)
    body = _body(runs, step_s, measured, sp, in_training, args.train_config, result, slowdown)
    command = shlex.join(["rollarc", "bench", "spot", *argv])  # the arguments change what is measured (--ray-jobs)
    return finish("spot", body, result, command, args)


def _result(
    args: argparse.Namespace,
    cfg: Any,
    runs: dict[str, dict[str, FleetResult]],
    measured: dict[str, Any],
    sp: dict[str, Any],
    in_training: dict[str, Any] | None,
    step_s: float,
    jobs: int,
    slowdown: float,
) -> dict[str, Any]:
    """The JSON: the fleet model's runs, the measured pull vs push, SP recovery, and the cost of spot capacity."""
    tc = cfg.train
    pulls = [r["pull"] for r in runs.values()]
    high = runs["high_notice"]
    elastic_s, warm_s = statistics.median(sp["elastic_s"]), statistics.median(sp["warm_restart_s"])
    cat = load_catalogue(CATALOGUE)
    on_demand, spot = cat.price_per_hour(args.price_kind), cat.price_per_hour(args.price_kind, spot=True)
    roles = cfg.cluster.roles
    fixed = (roles.trainer.units + roles.sampler.units) * on_demand
    explorers = cfg.cluster.pools[roles.explorer.pool].count
    cost_on_demand = fixed + explorers * on_demand  # USD per hour of run
    cost_spot = slowdown * (fixed + explorers * spot)
    return {
        "lost_jobs": sum(p.lost_jobs for p in pulls) + measured["pull"]["lost_jobs"],
        "duplicate_jobs": sum(p.duplicates for p in pulls) + measured["pull"]["duplicate_jobs"],
        "throughput_ratio_pull_vs_push": measured["throughput_ratio"],
        "pull_vs_push_measured": measured,
        "throughput_ratio_pull_vs_push_high_modelled": high["pull"].throughput() / high["push"].throughput(),
        "recovery_s_elastic": elastic_s,
        "recovery_s_warm_restart": warm_s,
        "recovery_s_cold": sp["cold_restart_s"],
        "recovery_speedup": sp["recovery_speedup"],
        "recovery_baseline": f"warm restart at SP degree {sp['degree_after_loss']} (after {sp['members']} -> "
        f"{sp['degree_after_loss']}): the survivors reload the weights from disk",
        "recovery_speedup_vs_cold": sp["recovery_speedup_vs_cold"],
        "sp_recovery": sp,
        "recovery_speedup_training": None if in_training is None else in_training["recovery_speedup"],
        "recovery_in_training": in_training,
        "cost_ratio_spot_vs_ondemand": cost_on_demand / cost_spot,
        "time_ratio_spot_vs_ondemand": slowdown,
        "sp_degree_after_loss": int(sp["degree_after_loss"]),
        "cluster_scale": cluster_scale(
            args.cluster_explorers, args.cluster_on_demand, args.cluster_step_s, tc.sample_steps, spot / on_demand
        ),
        "step_s": step_s,
        "images_per_s": {
            k: {m: r[m].throughput() * cfg.explore.candidates / step_s for m in r} for k, r in runs.items()
        },
        "lost_steps": {k: {m: r[m].lost_steps for m in r} for k, r in runs.items()},
        "rates_per_node_per_1000_steps": RATES,
        "jobs": jobs,
        "slots": args.slots,
        "price_kind": args.price_kind,
    }


def _body(
    runs: dict[str, dict[str, FleetResult]],
    step_s: float,
    measured: dict[str, Any],
    sp: dict[str, Any],
    in_training: dict[str, Any] | None,
    train_config: str,
    result: dict[str, Any],
    slowdown: float,
) -> str:
    """The published block: the fleet model's table, then the measured sentences."""
    elastic_s, warm_s = statistics.median(sp["elastic_s"]), statistics.median(sp["warm_restart_s"])
    rows = [_row(k, r["pull"], r["push"], step_s) for k, r in runs.items()]
    body = markdown_table(
        [
            "preemption",
            "pull jobs/s",
            "push jobs/s",
            "pull / push",
            "pull lost steps",
            "push lost steps",
            "pull lost jobs",
            "pull duplicates",
        ],
        rows,
    )
    mp, mq = measured["pull"], measured["push"]
    body += (
        f"\n\nMeasured on Ray ({measured['jobs']} jobs of {measured['job_steps']} steps, {measured['slots']} spot "
        f"nodes, trace {measured['trace'] or 'drawn at spot.rate_per_hour'}{_overrides(measured)}): "
        f"pull {mp['jobs_per_s']:.3f} jobs/s, push {mq['jobs_per_s']:.3f} jobs/s "
        f"({measured['throughput_ratio']:.2f}×); redone jobs pull {mp['redone_jobs']} / push {mq['redone_jobs']}, "
        f"lost {mp['lost_jobs']} / {mq['lost_jobs']}; preemptions that hit a node before the mode finished "
        f"pull {mp['preemptions']} / push {mq['preemptions']} (the trace is in seconds: a mode that finishes first "
        f"meets fewer of its events); same rewards: {measured['same_rewards']}. {_accounting_sentence(measured)} "
        f"The table above is the tick model's prediction."
        f"\n\nSP recovery, {sp['members']} → {sp['degree_after_loss']} members (each a Ray actor on its own node; "
        f"{sp['rounds']} node losses, medians): elastic regroup {elastic_s:.3f} s, warm restart at the same degree "
        f"{warm_s:.3f} s ({sp['recovery_speedup']:.1f}×); cold restart (new actors) {sp['cold_restart_s']:.3f} s "
        f"({sp['recovery_speedup_vs_cold']:.1f}×); Ray saw each loss in "
        f"{statistics.median(sp['detect_s']):.2f} s (not in either time). "
        f"{_training_sentence(in_training, train_config)}"
        f"Spot vs on-demand exploration cost ratio {result['cost_ratio_spot_vs_ondemand']:.2f}× "
        f"(run slowed {slowdown:.3f}× at the low rate)."
    )
    return body
