"""``rollarc bench sim``: simulator speed at 3,072 GPUs, and the RollArc-vs-monolithic ratio.

Runs ``configs/sim/rollarc_3072.yaml`` (3,072 GPUs, 100 steps, 102,400 trajectories) and its
equal-cost baseline ``configs/sim/monolithic_h800_3072.yaml`` in the same process, timing each.
The speed goal is under 60 s of wall time on one core for the RollArc scenario. ``--quick`` runs
3 steps of each, for smoke tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollarc.bench.report_file import (
    REPO_ROOT,
    add_docs_flag,
    emit_json,
    markdown_table,
    publish,
)
from rollarc.sim.cli import comparison, run_scenario

SCENARIO = Path("configs/sim/rollarc_3072.yaml")
BASELINE = Path("configs/sim/monolithic_h800_3072.yaml")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench sim", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 steps of each scenario (smoke test)")
    parser.add_argument("--json", action="store_true", help="accepted; the JSON line is always printed last")
    add_docs_flag(parser)
    parser.add_argument("--steps", type=int, default=None, help="override the scenarios' 100 steps")
    args = parser.parse_args(argv)
    steps = 3 if args.quick else args.steps
    overrides = [f"steps={steps}"] if steps else []
    print(f"simulating {SCENARIO} ...", flush=True)
    ours = run_scenario(REPO_ROOT / SCENARIO, overrides)
    gpus = sum(p.count for p in ours.pools.values() if p.kind != "cpu")
    print(
        f"  {gpus} GPUs, {ours.steps} steps, {ours.trajectories_finished:,} trajectories, {ours.events:,} events "
        f"in {ours.wall_s:.1f} s ({ours.events_per_s:,.0f} events/s); step {ours.step_time_s:.1f} s",
        flush=True,
    )
    print(f"simulating {BASELINE} ...", flush=True)
    base = run_scenario(REPO_ROOT / BASELINE, overrides)
    print(f"  {base.events:,} events in {base.wall_s:.1f} s; step {base.step_time_s:.1f} s", flush=True)
    ratios = comparison(ours, base)
    print(
        f"predicted: RollArc-like {ratios['speedup']:.2f}x faster per step, {ratios['cost_per_step_ratio']:.2f}x cheaper per step"
    )
    result = {
        "gpus": gpus,
        "steps": ours.steps,
        "trajectories": ours.trajectories_finished,
        "events": ours.events,
        "wall_s": ours.wall_s,
        "events_per_s": ours.events_per_s,
        "baseline_wall_s": base.wall_s,
        "step_time_s": ours.step_time_s,
        "baseline_step_time_s": base.step_time_s,
        "speedup": ratios["speedup"],
        "cost_per_step_ratio": ratios["cost_per_step_ratio"],
        "dropped_groups": ours.dropped_groups,
    }
    rows = [
        [
            "rollarc-3072 (async k=1, H800+H20, serverless judge)",
            gpus,
            ours.steps,
            ours.trajectories_finished,
            ours.events,
            ours.wall_s,
            ours.events_per_s,
            ours.step_time_s,
            ours.cost_per_step_usd,
        ],
        [
            "monolithic-h800-sync (equal cost)",
            sum(p.count for p in base.pools.values() if p.kind != "cpu"),
            base.steps,
            base.trajectories_finished,
            base.events,
            base.wall_s,
            base.events_per_s,
            base.step_time_s,
            base.cost_per_step_usd,
        ],
    ]
    table = markdown_table(
        ["scenario", "GPUs", "steps", "trajectories", "events", "wall s", "events/s", "sim. step s", "sim. $/step"],
        rows,
    )
    body = (
        table + f"\n\nPredicted speed-up {ratios['speedup']:.2f}x, "
        f"cost per step {ratios['cost_per_step_ratio']:.2f}x lower."
    )
    publish("sim", body, result, "rollarc bench sim", quick=args.quick, no_docs=args.no_docs)
    emit_json(result)
    return 0
