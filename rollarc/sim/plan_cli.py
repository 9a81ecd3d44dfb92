"""``rollarc plan``: choose a placement, show it next to the best homogeneous one, write it as config.

    rollarc plan --cluster configs/cluster/h800_h20.yaml --workload configs/cluster/workloads/moe235b_agentic.yaml
    rollarc plan --cluster C.yaml --workload W.yaml --budget 3000 --emit-config plan.yaml --simulate 5 --json
    rollarc plan --cluster C.yaml --workload W.yaml --base configs/multitask.yaml --emit-config planned.yaml

Without ``--base``, ``--emit-config`` writes the placement fragment (``cluster:`` + ``tasks:``); with
it, a complete training config that ``rollarc train`` runs unchanged (see ``train_config``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.inventory import Inventory, load_inventory
from rollarc.cluster.planner import Objective, Plan, Planner
from rollarc.cluster.train_config import write_planned_config
from rollarc.cluster.workload import Workload, load_workload
from rollarc.config.io import ConfigError


def plan_summary(plan: Plan, catalogue: Catalogue, workload: Workload) -> dict[str, Any]:
    est = plan.estimate
    return {
        "step_time_s": est.step_time_s,
        "trajectories_per_s": est.trajectories_per_s,
        "tokens_per_s": est.tokens_per_step / est.step_time_s,
        "price_per_hour": plan.price_per_hour,
        "cost_per_step_usd": plan.cost_per_step_usd,
        "phases_s": {
            "rollout": est.rollout_s,
            "tail": est.tail_s,
            "env": est.env_s,
            "reward": est.reward_s,
            "train": est.train_s,
            "sync": est.sync_s,
        },
        "roles": plan.roles(catalogue, workload),
        "fragment": plan.fragment(catalogue, workload).as_dict(),
    }


def format_plan(title: str, summary: dict[str, Any]) -> str:
    lines = [
        f"{title}: step {summary['step_time_s']:.4g} s, {summary['trajectories_per_s']:.4g} traj/s, "
        f"${summary['price_per_hour']:,.0f}/h, ${summary['cost_per_step_usd']:,.2f}/step"
    ]
    for row in summary["roles"]:
        tasks = f" [{row['tasks']}]" if row["tasks"] else ""
        lines.append(f"  {row['role']:<34} {row['device']:<9} {row['count']:>6}{tasks}")
    return "\n".join(lines)


def _simulate(
    plan: Plan,
    inventory: Inventory,
    catalogue: Catalogue,
    cluster_path: Path,
    workload: Workload,
    workload_path: Path,
    steps: int,
) -> dict[str, Any]:
    """Check a plan with the discrete-event simulator (same costs, queues and tails modelled)."""
    from rollarc.sim.plan_scenario import plan_scenario  # deferred: simpy is heavy; only --simulate needs it
    from rollarc.sim.setup import build_setup
    from rollarc.sim.simulator import simulate

    catalogue_path = str((cluster_path.parent / inventory.catalogue).resolve())
    loaded = plan_scenario(
        plan.fragment(catalogue, workload),
        inventory,
        catalogue,
        catalogue_path,
        workload,
        str(workload_path.resolve()),
        steps,
    )
    result = simulate(build_setup(loaded))
    return {
        "step_time_s": result.step_time_s,
        "trajectories_per_s": result.trajectories_per_s,
        "cost_per_step_usd": result.cost_per_step_usd,
        "dropped_groups": result.dropped_groups,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc plan", description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", required=True, help="what can be reserved (see configs/cluster/*.yaml)")
    parser.add_argument("--workload", required=True, help="workload profile (see configs/cluster/workloads/)")
    parser.add_argument("--budget", type=float, default=None, help="USD per hour the reserved cluster may cost")
    parser.add_argument(
        "--objective",
        choices=["time", "cost"],
        default=None,
        help="minimise step time, or cost per step (default: cost with --budget, else time)",
    )
    parser.add_argument(
        "--emit-config",
        metavar="PATH",
        help="write the plan as YAML: the fragment (cluster + tasks), or with --base a full training config",
    )
    parser.add_argument(
        "--base",
        metavar="CONFIG",
        help="training config whose cluster placement and tasks' rollout_pool the plan replaces",
    )
    parser.add_argument(
        "--simulate", type=int, metavar="STEPS", default=0, help="also simulate both plans for STEPS steps"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last)")
    args = parser.parse_args(argv)
    try:
        if args.base and not args.emit_config:
            raise ConfigError("--base needs --emit-config PATH (where to write the planned training config)")
        cluster_path, workload_path = Path(args.cluster), Path(args.workload)
        inventory, catalogue = load_inventory(cluster_path)
        workload = load_workload(workload_path)
        objective: Objective = args.objective or ("cost" if args.budget is not None else "time")
        planner = Planner(inventory, catalogue, workload, args.budget, objective)
        best, homogeneous = planner.plan(), planner.plan(homogeneous_only=True)
        out: dict[str, Any] = {
            "objective": objective,
            "budget_per_hour": args.budget,
            "plan": plan_summary(best, catalogue, workload),
            "homogeneous": plan_summary(homogeneous, catalogue, workload),
        }
        out["speedup_vs_homogeneous"] = homogeneous.estimate.step_time_s / best.estimate.step_time_s
        print(format_plan("plan", out["plan"]))
        print(format_plan("best homogeneous", out["homogeneous"]))
        print(f"predicted speed-up over homogeneous: {out['speedup_vs_homogeneous']:.2f}x")
        if args.simulate:
            for key, plan in (("plan", best), ("homogeneous", homogeneous)):
                out[key]["simulated"] = _simulate(
                    plan, inventory, catalogue, cluster_path, workload, workload_path, args.simulate
                )
                sim = out[key]["simulated"]
                print(f"simulated {key}: step {sim['step_time_s']:.1f} s, {sim['trajectories_per_s']:.2f} traj/s")
        if args.emit_config:
            fragment = best.fragment(catalogue, workload)
            if args.base:
                header = (
                    f"Written by: rollarc plan --cluster {args.cluster} --workload {args.workload} --base {args.base} "
                    f"--emit-config {args.emit_config}\n{format_plan('plan', out['plan']).splitlines()[0]}\n"
                    "cluster and tasks[*].rollout_pool come from the plan; everything else from the base config."
                )
                path = write_planned_config(args.base, fragment, args.emit_config, header)
            else:
                path = fragment.write_yaml(args.emit_config)
            out["emitted_config"] = str(path)
            print(f"wrote {path}")
        if args.json:
            print(json.dumps(out), flush=True)
        return 0
    except ConfigError as err:
        print(f"rollarc plan: {err}", file=sys.stderr)
        return 2
