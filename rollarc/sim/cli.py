"""``rollarc simulate``: run scenarios, compare against a baseline, or calibrate from real runs.

rollarc simulate configs/sim/rollarc_3072.yaml --baseline configs/sim/monolithic_h800_3072.yaml
rollarc simulate configs/sim/rollarc_3072.yaml steps=10 --json
rollarc simulate --calibrate runs/sync-run runs/async-run [--holdout] --json
rollarc simulate --from-run runs/multitask-RUN [--cluster C.yaml] [--workload-model W.yaml] --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from rollarc.cluster.workload import load_workload
from rollarc.config.io import ConfigError
from rollarc.sim.calibrate import calibrate
from rollarc.sim.from_run import DEFAULT_CLUSTER, DEFAULT_MODEL, compare_routing, compare_workload_routing
from rollarc.sim.result import SimResult
from rollarc.sim.run_dir import load_run, write_run
from rollarc.sim.scenario import LoadedScenario, load_scenario
from rollarc.sim.setup import build_setup
from rollarc.sim.simulator import simulate


def run_scenario(path: str | Path, overrides: list[str] | None = None, record_timeline: bool = False) -> SimResult:
    return simulate(build_setup(load_scenario(path, overrides)), record_timeline=record_timeline)


def comparison(result: SimResult, baseline: SimResult) -> dict[str, float]:
    """How much faster and cheaper ``result`` is than ``baseline`` (values > 1 favour ``result``)."""
    return {
        "speedup": baseline.step_time_s / result.step_time_s,
        "throughput_ratio": result.trajectories_per_s / baseline.trajectories_per_s,
        "cost_per_step_ratio": baseline.cost_per_step_usd / result.cost_per_step_usd,
        "reserved_price_ratio": result.price_per_hour / baseline.price_per_hour,
    }


def format_result(r: SimResult) -> str:
    lines = [
        f"{r.name}: {r.mode}, {r.placement}, {r.routing} routing, {r.steps} steps",
        f"  step time {r.step_time_s:.1f} s (steady {r.steady_step_time_s:.1f} s)   "
        f"throughput {r.trajectories_per_s:.2f} traj/s, {r.tokens_per_s:,.0f} tok/s",
        f"  trajectories trained {r.trajectories:,} {r.trained_by_task}  dropped groups {r.dropped_groups} {r.dropped_by_task}  "
        f"mean staleness {r.mean_staleness:.2f}",
        f"  cost ${r.price_per_hour:,.0f}/h reserved + ${r.serverless_usd:,.2f} serverless = ${r.cost_per_step_usd:,.2f}/step",
        "  pool        kind     count  busy   bubble  utilisation",
    ]
    for name, p in r.pools.items():
        util = "-" if p.utilisation is None else f"{p.utilisation:.3f}"
        lines.append(f"  {name:<11} {p.kind:<8} {p.count:>5}  {p.busy_fraction:5.2f}  {p.bubble_fraction:6.2f}  {util}")
    lines.append(f"  simulated {r.events:,} events in {r.wall_s:.2f} s ({r.events_per_s:,.0f} events/s)")
    return "\n".join(lines)


def _print_json(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc simulate", description=__doc__.split("\n")[0])
    parser.add_argument("scenario", nargs="?", help="scenario YAML (see configs/sim/)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of the scenario, e.g. steps=10")
    parser.add_argument("--baseline", help="a second scenario to compare against (ratios > 1 favour the first)")
    parser.add_argument(
        "--calibrate",
        nargs="+",
        metavar="RUN_DIR",
        help="fit costs from run directories and report the prediction error",
    )
    parser.add_argument(
        "--holdout", action="store_true", help="--calibrate: predict each run from the costs of the other runs only"
    )
    parser.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="simulate the run's measured task mix (task_profiles.json) on a heterogeneous cluster: "
        "affinity routing vs random routing",
    )
    parser.add_argument(
        "--from-workload",
        metavar="W.yaml",
        help="the same comparison for a workload file's task mix and model (instead of a run's)",
    )
    parser.add_argument(
        "--cluster", help="--from-run/--from-workload: inventory to plan on (default configs/cluster/mid_128.yaml)"
    )
    parser.add_argument(
        "--workload-model",
        metavar="W.yaml",
        help="--from-run: workload file whose model and efficiency are simulated "
        "(default configs/cluster/workloads/moe30b_agentic.yaml)",
    )
    parser.add_argument("--steps", type=int, default=20, help="--from-run: training steps to simulate (default 20)")
    parser.add_argument(
        "--groups-per-step",
        type=int,
        default=None,
        help="--from-run: B on the simulated cluster (default: the run's B)",
    )
    parser.add_argument("--seed", type=int, default=0, help="--from-run: simulation seed (default 0)")
    parser.add_argument(
        "--timeline", metavar="DIR", help="also write the simulated run as a run directory (config, timeline, metrics)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last)")
    args = parser.parse_args(argv)
    try:
        if args.from_run or args.from_workload:
            return _from_run(args)
        if args.calibrate:
            report = calibrate([load_run(path) for path in args.calibrate], holdout=args.holdout)
            for run in report["runs"]:
                pred = ", ".join(f"{mode} {t:.2f} s" for mode, t in run["predicted_step_time_s"].items())
                print(
                    f"{run['run_dir']} ({run['mode']}): measured {run['measured_step_time_s']:.2f} s/step; "
                    f"predicted {pred}; error {100 * run['error']:.1f}%"
                )
            if args.json:
                _print_json(report)
            return 0
        if not args.scenario:
            parser.error("give a scenario YAML or --calibrate RUN_DIR")
        loaded = load_scenario(args.scenario, args.overrides)
        result = simulate(build_setup(loaded), record_timeline=bool(args.timeline))
        print(format_result(result))
        output: dict[str, Any] = result.as_dict()
        if args.timeline:
            _write_timeline(args.timeline, loaded, result)
            print(f"  wrote run directory {args.timeline}")
        if args.baseline:
            base = run_scenario(args.baseline)
            print(format_result(base))
            ratios = comparison(result, base)
            print("  vs baseline: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
            output = {"scenario": output, "baseline": base.as_dict(), **ratios}
        if args.json:
            _print_json(output)
        return 0
    except (ConfigError, ValueError) as err:
        print(f"rollarc simulate: {err}", file=sys.stderr)
        return 2


def format_routing_comparison(report: dict[str, Any]) -> str:
    what = f"{report['run_dir']}: measured task mix" if "run_dir" in report else f"{report['source']}: task mix"
    lines = [
        f"{what} on {report['cluster']} "
        f"(model {report['model']}, B={report['batch']['groups_per_step']}, G={report['batch']['group_size']}, "
        f"k={report['batch']['max_staleness']})",
        "  task           share  turns  prompt/turn  uncached  new/turn  env ms  class          planned pool",
    ]
    for row in report["tasks"]:
        lines.append(
            f"  {row['task']:<14} {row['share']:>5g}  {row['turns']:5.1f}  {row['prompt_tokens_per_turn']:11.1f}  "
            f"{row['uncached_share']:8.2f}  {row['new_tokens_per_turn']:8.1f}  {row['env_step_ms']:6.2f}  "
            f"{row['class']:<14} {row['pool']}"
        )
    roles = report["placement"]["cluster"]["roles"]
    tasks_on: dict[str, list[str]] = {}
    for row in report["tasks"]:
        tasks_on.setdefault(row["pool"], []).append(row["task"])
    rollouts = "; ".join(
        f"{r['pool']} {r['replicas']} x {r.get('units', 1)} [{', '.join(tasks_on.get(r['pool'], []))}]"
        for r in roles["rollout"]
    )
    lines.append(
        f"planned placement: train {roles['train']['pool']} x {roles['train']['replicas']}; rollout engines {rollouts}; "
        f"env {roles['env']['pool']} x {roles['env']['replicas']}"
    )
    for routing in ("affinity", "random"):
        r = report[routing]
        lines.append(
            f"{routing} routing: step {r['step_time_s']:.4g} s, {r['trajectories_per_s']:.4g} traj/s, "
            f"{r['tokens_per_s']:,.0f} tok/s"
        )
        for name, pool in r["pools"].items():
            util = "-" if pool["utilisation"] is None else f"{pool['utilisation']:.4f}"
            lines.append(
                f"  {name:<8} {pool['kind']:<6} {pool['count']:>5}  busy {pool['busy_fraction']:.3f}  utilisation {util}"
            )
        lines.append(
            "  generated tokens by task@pool: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in r["generated_by_task_pool"].items())
        )
    if report["rollout_pools"] < 2:
        lines.append("the plan uses a single rollout pool, so routing cannot differ")
    lines.append(
        f"affinity vs random routing: speed-up {report['speedup']:.3f}x, throughput ratio {report['throughput_ratio']:.3f}x"
    )
    return "\n".join(lines)


def _from_run(args: argparse.Namespace) -> int:
    if args.scenario or args.calibrate or args.baseline or (args.from_run and args.from_workload):
        raise ConfigError(
            "--from-run / --from-workload cannot be combined with each other, a scenario, --baseline or --calibrate"
        )
    cluster = args.cluster or DEFAULT_CLUSTER
    if args.from_run:
        report = compare_routing(
            args.from_run,
            cluster,
            args.workload_model or DEFAULT_MODEL,
            steps=args.steps,
            seed=args.seed,
            groups_per_step=args.groups_per_step,
        )
    else:
        if args.workload_model:
            raise ConfigError(
                "--workload-model applies to --from-run; --from-workload uses the workload file's own model"
            )
        overrides = [f"batch.groups_per_step={args.groups_per_step}"] if args.groups_per_step else []
        workload = load_workload(args.from_workload, overrides)
        report = compare_workload_routing(
            workload, cluster, args.steps, args.seed, source=args.from_workload, label=Path(args.from_workload).stem
        )
    print(format_routing_comparison(report))
    if args.json:
        _print_json(report)
    return 0


def _write_timeline(path: str, loaded: LoadedScenario, result: SimResult) -> None:
    wl = loaded.workload
    k = loaded.max_staleness
    config = {
        "train": {
            "groups_per_step": wl.batch.groups_per_step,
            "group_size": wl.batch.group_size,
            "steps": result.steps,
        },
        "async": {"mode": "sync" if k == 0 else "async", "max_staleness": k},
    }
    ends = [0.0, *result.step_ends]
    write_run(path, config, result.timeline or [], [b - a for a, b in itertools.pairwise(ends)])
