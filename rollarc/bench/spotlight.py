"""``rollarc bench spotlight``: Flow-GRPO with random seeds vs stale-weight seed exploration (± a planner).

Every mode trains from the same pretrained base with the same trainer and sampler resources, for the same
number of steps, with ``--seeds`` RL seeds (the seed fixes the prompt schedule and the candidate noise
seeds):

- ``baseline``: each group is ``G`` random noise seeds;
- ``explore``: an explorer on the ``spot`` pool scores ``explore.candidates`` seeds per prompt on weights
  one version behind, and the trainer samples the ``G`` most contrastive with the current weights;
- ``planner``: the same candidate budget per step, split over the step's prompts by ``--planner``
  (``explore.planner``: ``contrast``; some prompts get more candidates, some none).

The explorer runs as in ``rollarc train`` on spot capacity (``spot.enabled``): pull workers on nodes of a local
multi-node cluster that ``--spot-trace`` preempts through Ray's drain API (``spot.target: busy``: each preemption
hits the worker while it holds a job), with leases, in-flight commits and replacements; each mode's fleet
counters are reported per seed (``spot``). ``--no-spot`` runs the explorer as one actor on the spot pool that is
never preempted (the path before the fleet).

The **target** follows :mod:`rollarc.bench.time_to_target`: ``s0 + fraction · (p − s0)``, with ``s0``
the held-out reward of the shared base and ``p`` the lowest of the baseline seeds' best held-out
rewards, so every baseline seed reaches it within its budget, and with ``fraction < 1`` below the noisy
peaks. Reported per run: the RL wall time (evaluations excluded) and the steps to reach it (``null`` if
never); per mode the median and ``[min, max]`` over seeds (a miss counts as infinite in the median);
the speed-ups (ratio of medians, baseline over mode, in wall time ``speedup_wall_*`` and in steps
``speedup_steps_*``); ``cost_ratio_*``, the device-seconds to target (median wall time × the mode's
device units, the explorer's included) of the mode over the baseline's; the cost to target
(trainer and sampler on on-demand capacity, the explorer on spot capacity, priced from
``configs/cluster/hardware.yaml`` as ``--price-kind`` devices); and Kendall τ between per-seed rewards
of the same prompts and seeds under versions ``v`` and ``v + s`` (s = 1, 2, 4) of the baseline's first
seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rollarc.bench.harness import RUNS_HELP, add_overrides, bench_parser, finish
from rollarc.bench.report_file import markdown_table
from rollarc.bench.time_to_target import first_crossing, median_time, select_target, speedup, spread
from rollarc.cluster.catalogue import load_catalogue
from rollarc.diffusion.config import CACHE, T2IConfig, load_t2i_config
from rollarc.diffusion.model import load_policy
from rollarc.diffusion.pretrain import load_or_pretrain
from rollarc.diffusion.sampling import sample_sde
from rollarc.diffusion.tasks.base import split
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.workers import reward_table, score
from rollarc.rayproc.placement import CATALOGUE
from rollarc.runtime.t2i_entry import run_t2i
from rollarc.spotlight.kendall import kendall_tau

MODES = {
    "baseline": ["explore.enabled=false"],
    "explore": ["explore.enabled=true", "explore.planner=uniform"],
    "planner": ["explore.enabled=true"],  # + explore.planner=<--planner>
}
PLANNERS = ("contrast",)
# Every run: evaluation on all 41 held-out prompts every 2 steps (fine enough to time a crossing).
COMMON = ["train.eval_every=2", "train.eval_prompts=41"]
FULL = [
    "train.steps=30",
    "train.prompts_per_step=8",
    "train.group_size=8",
    "explore.candidates=24",
    "train.eval_seeds=3",
]
# Groups of 8 in both: with 4 prompts × 4 images the baseline's held-out reward fell (0.546 -> 0.470 in 16 steps).
QUICK = [
    "train.steps=12",
    "train.prompts_per_step=8",
    "train.group_size=8",
    "explore.candidates=16",
    "train.eval_seeds=2",
]
SPOT_TRACE = "configs/spot_trace_one_slot.yaml"  # configs/spot_trace.yaml's preemptions on the config's one spot node
# The fleet's counters reported per seed: whether preemption cost jobs, and how the fleet recovered.
SPOT_COUNTERS = (
    "preemptions",
    "drain_notices",
    "committed_on_notice",
    "requeued_on_expiry",
    "lost_jobs",
    "duplicate_jobs",
)
STALENESS = (1, 2, 4)
# Per-step metrics averaged over each run (absent in the baseline: exploration metrics).
STEP_METRICS = (
    "low_contrast_fraction",
    "reward_group_std",
    "chosen_var_fresh",
    "random_var_stale",
    "explored_fraction",
    "candidates_std",
)


def spot_overrides(trace: str | None) -> list[str]:
    """An exploring mode's overrides for the spot fleet under ``trace`` (None: no fleet; ``none``: the fleet with no
    preemption, to tell the fleet's own cost from the preemptions')."""
    if trace is None:
        return []
    if trace == "none":
        return ["spot.enabled=true", "spot.trace=null", "spot.rate_per_hour=0", "spot.target=busy"]
    return ["spot.enabled=true", f"spot.trace={trace}", "spot.target=busy"]


def run_mode(
    config: str,
    overrides: list[str],
    label: str,
    seed: int,
    runs: Path,
    planner: str = "contrast",
    spot_trace: str | None = None,
) -> dict[str, Any]:
    cfg = load_t2i_config(
        config,
        [
            *overrides,
            *MODES[label],
            *([f"explore.planner={planner}"] if label == "planner" else []),
            *(spot_overrides(spot_trace) if label != "baseline" else []),
            f"seed={seed}",
            f"name={label}-s{seed}",
            f"run.dir={runs}",
            "run.progress=false",
            "run.tensorboard=false",
            "run.checkpoint_every=1",
            # every version kept: Kendall τ at staleness 2 and 4 reads checkpoints v and v + s (with the default
            # retention of 2 only s = 1 was left, and the 2026-12-05 runs report null for 2 and 4)
            "run.keep_last_checkpoints=0",
        ],
    )
    if run_t2i(cfg) != 0:
        raise RuntimeError(f"mode {label} seed {seed} failed")
    (run_dir,) = [p for p in runs.iterdir() if p.name.startswith(f"{label}-s{seed}-")]
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["run_dir"] = str(run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary["step_means"] = step_means(rows)
    return summary


def step_means(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each of :data:`STEP_METRICS` averaged over the run's steps that logged it (``None`` if none did)."""
    out: dict[str, float | None] = {}
    for key in STEP_METRICS:
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        out[key] = statistics.fmean(values) if values else None
    return out


def curves(evals: list[dict[str, Any]]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Held-out reward against RL wall time and against steps (the step-0 evaluation at 0)."""
    ordered = sorted(evals, key=lambda e: e["step"])
    return (
        [(float(e["rl_wall_s"]), float(e["reward"])) for e in ordered],
        [(float(e["step"]), float(e["reward"])) for e in ordered],
    )


def summarise(times: list[float | None]) -> dict[str, Any]:
    """Median (a miss counts as infinite: then ``None``) and ``[min, max]`` over seeds."""
    median = median_time(times)
    return {"median": None if median == float("inf") else median, "spread": spread(times)}


def kendall_by_staleness(cfg: T2IConfig, run_dir: Path, prompts: int = 8, seeds: int = 12) -> dict[str, float | None]:
    """Mean τ between per-seed rewards under versions v and v + s, over the run's checkpoints and prompts."""
    torch.set_num_threads(cfg.model.threads)
    tasks = [make_task(n, CACHE) for n in cfg.tasks]
    table = reward_table(tasks)
    train = [p for t in tasks for p in split(t.prompts())[0]][:prompts]
    flat_p = [p for p in train for _ in range(seeds)]
    flat_s = [1000 + k for _ in train for k in range(seeds)]
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*"))
    rewards = {}
    for ck in checkpoints:
        traj = sample_sde(
            load_policy(ck / "policy").eval(), flat_p, flat_s, cfg.train.sample_steps, cfg.train.noise_level, 0
        )
        rewards[int(ck.name.split("_")[1])] = np.array(score(table, flat_p, traj.images())).reshape(len(train), seeds)
    out: dict[str, float | None] = {}
    for s in STALENESS:
        taus = [
            t
            for v in rewards
            if v + s in rewards
            for a, b in zip(rewards[v], rewards[v + s], strict=True)
            if (t := kendall_tau(a.tolist(), b.tolist())) is not None
        ]
        out[str(s)] = statistics.fmean(taus) if taus else None
    return out


def device_seconds(median_s: float | None, units: float) -> float | None:
    """Device-seconds to target: the median wall time × the device units the mode holds (``None``: missed)."""
    return None if median_s is None else median_s * units


def cost_ratios(device_s: dict[str, float | None]) -> dict[str, float | None]:
    """``cost_ratio_<mode>``: the mode's device-seconds to target over the baseline's (``None`` if either missed)."""
    base = device_s["baseline"]
    return {
        f"cost_ratio_{m}": (d / base if d is not None and base else None)
        for m, d in device_s.items()
        if m != "baseline"
    }


def analyse(
    results: dict[str, list[dict[str, Any]]], fraction: float, per_hour: dict[str, float], units: dict[str, float]
) -> dict[str, Any]:
    """The benchmark's figures from each mode's run summaries (``evals``, ``step_means``, image counts).

    ``per_hour``: the USD per hour of each mode's capacity (the explorer's spot unit included); ``units``:
    the device units each mode holds (trainer, sampler and, when exploring, the explorer).
    """
    start = results["baseline"][0]["evals"][0]["reward"]
    target = select_target(start, [curves(r["evals"])[0] for r in results["baseline"]], fraction)
    time_to_target: dict[str, list[float | None]] = {}
    steps_to_target: dict[str, list[float | None]] = {}
    for mode, runs in results.items():
        by_time, by_step = zip(*(curves(r["evals"]) for r in runs), strict=True)
        time_to_target[mode] = [None if target is None else first_crossing(c, target) for c in by_time]
        steps_to_target[mode] = [None if target is None else first_crossing(c, target) for c in by_step]
    time_summary = {m: summarise(v) for m, v in time_to_target.items()}
    costs = {
        m: None if time_summary[m]["median"] is None else float(time_summary[m]["median"]) / 3600 * per_hour[m]
        for m in results
    }
    b_cost = costs["baseline"]
    device_s = {m: device_seconds(time_summary[m]["median"], units[m]) for m in results}
    return {
        "start_heldout_reward": start,
        "target_heldout_reward": target,
        "target_fraction": fraction,
        "time_to_target_s": time_to_target,
        "time_to_target_summary": time_summary,
        "steps_to_target": steps_to_target,
        "steps_to_target_summary": {m: summarise(v) for m, v in steps_to_target.items()},
        **{f"speedup_{m}": speedup(time_to_target["baseline"], time_to_target[m]) for m in results if m != "baseline"},
        **{
            f"speedup_wall_{m}": speedup(time_to_target["baseline"], time_to_target[m])
            for m in results
            if m != "baseline"
        },
        **{
            f"speedup_steps_{m}": speedup(steps_to_target["baseline"], steps_to_target[m])
            for m in results
            if m != "baseline"
        },
        "device_seconds_to_target": device_s,
        **cost_ratios(device_s),
        "cost_to_target_usd": costs,
        "cost_ratio": {m: (b_cost / c if b_cost and c else None) for m, c in costs.items() if m != "baseline"},
        "explored_per_trained_image": {
            m: statistics.fmean(r["explored_images"] / max(r["sampled_images"], 1) for r in rs)
            for m, rs in results.items()
        },
        "best_heldout_reward": {m: [max(e["reward"] for e in r["evals"]) for r in rs] for m, rs in results.items()},
        "final_heldout_reward": {m: [r["heldout_reward_after_rl"] for r in rs] for m, rs in results.items()},
        "step_means": {m: {k: [r["step_means"][k] for r in rs] for k in STEP_METRICS} for m, rs in results.items()},
        "spot": {
            m: {k: [r["spot"][k] for r in rs] for k in SPOT_COUNTERS}
            for m, rs in results.items()
            if all("spot" in r for r in rs)
        },
    }


def markdown_body(result: dict[str, Any]) -> str:
    """The docs/benchmarks.md block: one row per mode, then the target and τ."""
    time_to_target, steps_to_target = result["time_to_target_s"], result["steps_to_target"]
    costs, explored = result["cost_to_target_usd"], result["explored_per_trained_image"]
    rows = [
        [
            m,
            json.dumps([None if t is None else round(t, 1) for t in time_to_target[m]]),
            json.dumps(steps_to_target[m]),
            1.0 if m == "baseline" else (result.get(f"speedup_{m}") or "n/a"),
            1.0 if m == "baseline" else (result.get(f"speedup_steps_{m}") or "n/a"),
            costs[m] if costs[m] is not None else "n/a",
            explored[m],
        ]
        for m in time_to_target
    ]
    body = markdown_table(
        [
            "mode",
            "RL s to target (per seed)",
            "steps to target (per seed)",
            "speed-up (median time)",
            "speed-up (median steps)",
            "cost to target USD",
            "explored / trained images",
        ],
        rows,
    )
    target = result["target_heldout_reward"]
    target_text = "none (the baseline never improved)" if target is None else f"{target:.3f}"
    return body + (
        f"\n\nHeld-out reward {result['start_heldout_reward']:.3f} at step 0; target {target_text} "
        f"({result['target_fraction']} of the baseline's lowest peak gain); "
        f"Kendall τ by staleness {json.dumps(result.get('kendall_tau'))}." + spot_line(result)
    )


def spot_line(result: dict[str, Any]) -> str:
    """Where the explorer ran, and each exploring mode's fleet counters per seed (none for an older result)."""
    if "explorer_path" not in result:
        return ""
    counters = "; ".join(
        f"{mode}: " + ", ".join(f"{k} {json.dumps(v)}" for k, v in per_seed.items())
        for mode, per_seed in result.get("spot", {}).items()
    )
    trace = f" under {result['spot_trace']}" if result.get("spot_trace") else ""
    return f"\n\nExplorer: {result['explorer_path']}{trace}." + (f" Per seed: {counters}." if counters else "")


def _parser() -> argparse.ArgumentParser:
    parser = bench_parser(
        "bench spotlight",
        __doc__,
        quick="a short run: 12 steps of 8 groups of 8, 2 explored images per trained one",
        config="configs/t2i_quickstart.yaml",
        runs=RUNS_HELP,
        publish_as="spotlight",
        publish_help="the name its block and JSON are published under (another trace's run must not overwrite the "
        "headline: e.g. --spot-trace none --publish-as spotlight_nopreempt)",
    )
    add_overrides(parser, "every mode")
    parser.add_argument("--seeds", type=int, default=3, help="RL seeds per mode (at least 2)")
    parser.add_argument("--planner", choices=PLANNERS, default="contrast", help="explore.planner of the planner mode")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated modes to run (baseline always runs: it sets the target)",
    )
    parser.add_argument(
        "--fraction", type=float, default=0.8, help="target = s0 + fraction × (lowest baseline peak − s0)"
    )
    parser.add_argument("--price-kind", default="h800", help="catalogue device that prices every pool unit")
    parser.add_argument(
        "--spot-trace",
        default=SPOT_TRACE,
        help="preemption trace of the exploring modes' spot fleet (spot.trace); none: the fleet, never preempted",
    )
    parser.add_argument(
        "--no-spot", action="store_true", help="explore on one actor of the spot pool, never preempted (no fleet)"
    )
    return parser


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds {args.seeds}: the spread needs at least 2 RL seeds per mode")
    unknown = sorted(set(args.modes.split(",")) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    modes = [m for m in MODES if m == "baseline" or m in args.modes.split(",")]
    headline = args.spot_trace == SPOT_TRACE and not args.no_spot
    if args.publish_as == "spotlight" and not headline and not (args.quick or args.no_docs):
        parser.error("--spot-trace / --no-spot change what is measured: publish under its own name with --publish-as")
    overrides = [*COMMON, *(QUICK if args.quick else FULL), *args.overrides]
    base_cfg = load_t2i_config(args.config, overrides)
    tasks = [make_task(n, CACHE) for n in base_cfg.tasks]
    base = load_or_pretrain(base_cfg, tasks)  # the shared base is built before any timing
    overrides.append(f"model.path={base}")
    runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="rollarc-bench-spotlight-"))
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for seed in range(args.seeds):
        for label in modes:
            print(f"== {label} seed {seed}", flush=True)
            trace = None if args.no_spot else args.spot_trace
            results[label].append(run_mode(args.config, overrides, label, seed, runs, args.planner, trace))
    cat = load_catalogue(CATALOGUE)
    on_demand, spot = cat.price_per_hour(args.price_kind), cat.price_per_hour(args.price_kind, spot=True)
    roles = base_cfg.cluster.roles
    trainer_sampler = (roles.trainer.units + roles.sampler.units) * on_demand
    per_hour = {m: trainer_sampler + (0.0 if m == "baseline" else roles.explorer.units * spot) for m in modes}
    units = {
        m: float(roles.trainer.units + roles.sampler.units + (0 if m == "baseline" else roles.explorer.units))
        for m in modes
    }
    result = analyse(results, args.fraction, per_hour, units)
    tau = kendall_by_staleness(load_t2i_config(args.config, overrides), Path(results["baseline"][0]["run_dir"]))
    result.update(
        kendall_tau=tau,
        seeds=args.seeds,
        steps=base_cfg.train.steps,
        price_kind=args.price_kind,
        planner=args.planner,
        explorer_images_per_step=base_cfg.train.prompts_per_step * base_cfg.explore.candidates,
        explorer_path="actor on the spot pool, never preempted"
        if args.no_spot
        else "spot fleet (pull workers, Ray drains)",
        spot_trace=None if args.no_spot else args.spot_trace,
    )
    body = markdown_body(result)
    partial = modes != list(MODES)  # an ablation over some modes is not the benchmark's figure
    command = "rollarc bench spotlight" + ("" if headline else f" --spot-trace {args.spot_trace}")
    command += " --no-spot" if args.no_spot else ""
    command += f" --publish-as {args.publish_as}" if args.publish_as != "spotlight" else ""
    return finish(args.publish_as, body, result, command, args, publishable=not partial)
