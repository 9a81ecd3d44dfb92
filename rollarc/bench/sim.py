"""``rollarc bench sim``: simulator speed at 3,072 GPUs, and the RollArc-vs-monolithic ratio.

Runs ``configs/sim/rollarc_3072.yaml`` (3,072 GPUs, 100 steps, 102,400 trajectories) and its
equal-cost baseline ``configs/sim/monolithic_h800_3072.yaml`` in the same process, timing each.
The speed goal is under 60 s of wall time on one core for the RollArc scenario. ``--quick`` runs
3 steps of each, for smoke tests.
"""

from __future__ import annotations

from pathlib import Path

from rollarc.bench.harness import bench_parser, finish
from rollarc.bench.report_file import REPO_ROOT, markdown_table
from rollarc.sim.cli import comparison, run_scenario
from rollarc.sim.result import SimResult

SCENARIO = Path("configs/sim/rollarc_3072.yaml")
BASELINE = Path("configs/sim/monolithic_h800_3072.yaml")


def main(argv: list[str]) -> int:
    parser = bench_parser("bench sim", __doc__, quick="3 steps of each scenario (smoke test)")
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
    return finish("sim", docs_body(ours, base, ratios), result, "rollarc bench sim", args)


def docs_body(ours: SimResult, base: SimResult, ratios: dict[str, float]) -> str:
    """Both scenarios' rows (GPUs, events, wall time, simulated step time and cost) and the predicted ratios."""
    labels = ("rollarc-3072 (async k=1, H800+H20, serverless judge)", "monolithic-h800-sync (equal cost)")
    rows = [
        [
            label,
            sum(p.count for p in run.pools.values() if p.kind != "cpu"),
            run.steps,
            run.trajectories_finished,
            run.events,
            run.wall_s,
            run.events_per_s,
            run.step_time_s,
            run.cost_per_step_usd,
        ]
        for label, run in zip(labels, (ours, base), strict=True)
    ]
    table = markdown_table(
        ["scenario", "GPUs", "steps", "trajectories", "events", "wall s", "events/s", "sim. step s", "sim. $/step"],
        rows,
    )
    return (
        table + f"\n\nPredicted speed-up {ratios['speedup']:.2f}x, "
        f"cost per step {ratios['cost_per_step_ratio']:.2f}x lower."
    )
