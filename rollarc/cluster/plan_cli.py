"""``rollarc plan``: choose a placement, show it next to the best homogeneous one, write the fragment.

    rollarc plan --cluster configs/cluster/h800_h20.yaml --workload configs/cluster/workloads/moe235b_agentic.yaml
    rollarc plan --cluster C.yaml --workload W.yaml --budget 3000 --emit-config plan.yaml --simulate 5 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.inventory import Inventory, load_inventory
from rollarc.cluster.planner import Plan, Planner
from rollarc.cluster.workload import Workload, load_workload
from rollarc.configio import ConfigError


def plan_summary(plan: Plan, catalogue: Catalogue, workload: Workload) -> dict[str, Any]:
    est = plan.estimate
    return {
        "step_time_s": est.step_time_s,
        "trajectories_per_s": est.trajectories_per_s,
        "tokens_per_s": est.tokens_per_step / est.step_time_s,
        "price_per_hour": plan.price_per_hour,
        "cost_per_step_usd": plan.cost_per_step_usd,
        "phases_s": {"rollout": est.rollout_s, "tail": est.tail_s, "env": est.env_s, "reward": est.reward_s,
                     "train": est.train_s, "sync": est.sync_s},
        "roles": plan.roles(catalogue, workload),
        "fragment": plan.fragment(catalogue, workload).as_dict(),
    }


def format_plan(title: str, summary: dict[str, Any]) -> str:
    lines = [f"{title}: step {summary['step_time_s']:.1f} s, {summary['trajectories_per_s']:.2f} traj/s, "
             f"${summary['price_per_hour']:,.0f}/h, ${summary['cost_per_step_usd']:,.2f}/step"]
    for row in summary["roles"]:
        tasks = f" [{row['tasks']}]" if row["tasks"] else ""
        lines.append(f"  {row['role']:<34} {row['device']:<9} {row['count']:>6}{tasks}")
    return "\n".join(lines)


def _simulate(plan: Plan, inventory: Inventory, cluster_path: Path, workload_path: Path, steps: int, k: int) -> dict[str, Any]:
    """Check a plan with the discrete-event simulator (same costs, queues and tails modelled)."""
    from rollarc.sim.scenario import LoadedScenario, RewardService, Scenario
    from rollarc.sim.setup import build_setup
    from rollarc.sim.simulator import simulate

    catalogue_path = (cluster_path.parent / inventory.catalogue).resolve()
    fragment = plan.fragment(*_loaded_inputs(cluster_path, workload_path))
    offer = inventory.serverless
    reward = RewardService(mode="serverless", device=offer.device, cold_start_s=offer.cold_start_s, keep_alive_s=offer.keep_alive_s,
                           max_instances=offer.max_instances, price_markup=offer.price_markup) if offer and offer.enabled else RewardService(mode="dedicated")
    scenario = Scenario(name="plan", catalogue=str(catalogue_path), workload=str(workload_path.resolve()), steps=steps,
                        mode="sync" if k == 0 else "async", max_staleness=k if k else None, cluster=fragment.cluster,
                        tasks=fragment.tasks, reward=reward)
    catalogue, workload = _loaded_inputs(cluster_path, workload_path)
    result = simulate(build_setup(LoadedScenario(scenario=scenario, catalogue=catalogue, workload=workload, max_staleness=k, source="plan")))
    return {"step_time_s": result.step_time_s, "trajectories_per_s": result.trajectories_per_s, "cost_per_step_usd": result.cost_per_step_usd,
            "dropped_groups": result.dropped_groups}


def _loaded_inputs(cluster_path: Path, workload_path: Path) -> tuple[Catalogue, Workload]:
    _inv, catalogue = load_inventory(cluster_path)
    return catalogue, load_workload(workload_path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc plan", description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", required=True, help="what can be reserved (see configs/cluster/*.yaml)")
    parser.add_argument("--workload", required=True, help="workload profile (see configs/cluster/workloads/)")
    parser.add_argument("--budget", type=float, default=None, help="USD per hour the reserved cluster may cost")
    parser.add_argument("--objective", choices=["time", "cost"], default=None,
                        help="minimise step time, or cost per step (default: cost with --budget, else time)")
    parser.add_argument("--emit-config", metavar="PATH", help="write the config fragment (cluster + tasks) as YAML")
    parser.add_argument("--simulate", type=int, metavar="STEPS", default=0, help="also simulate both plans for STEPS steps")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last)")
    args = parser.parse_args(argv)
    try:
        cluster_path, workload_path = Path(args.cluster), Path(args.workload)
        inventory, catalogue = load_inventory(cluster_path)
        workload = load_workload(workload_path)
        objective = args.objective or ("cost" if args.budget is not None else "time")
        planner = Planner(inventory, catalogue, workload, args.budget, objective)
        best, homogeneous = planner.plan(), planner.plan(homogeneous_only=True)
        out: dict[str, Any] = {"objective": objective, "budget_per_hour": args.budget,
                               "plan": plan_summary(best, catalogue, workload),
                               "homogeneous": plan_summary(homogeneous, catalogue, workload)}
        out["speedup_vs_homogeneous"] = homogeneous.estimate.step_time_s / best.estimate.step_time_s
        print(format_plan("plan", out["plan"]))
        print(format_plan("best homogeneous", out["homogeneous"]))
        print(f"predicted speed-up over homogeneous: {out['speedup_vs_homogeneous']:.2f}x")
        if args.simulate:
            k = workload.batch.max_staleness
            for key, plan in (("plan", best), ("homogeneous", homogeneous)):
                out[key]["simulated"] = _simulate(plan, inventory, cluster_path, workload_path, args.simulate, k)
                sim = out[key]["simulated"]
                print(f"simulated {key}: step {sim['step_time_s']:.1f} s, {sim['trajectories_per_s']:.2f} traj/s")
        if args.emit_config:
            path = best.fragment(catalogue, workload).write_yaml(args.emit_config)
            print(f"wrote {path}")
        if args.json:
            print(json.dumps(out), flush=True)
        return 0
    except ConfigError as err:
        print(f"rollarc plan: {err}", file=sys.stderr)
        return 2
