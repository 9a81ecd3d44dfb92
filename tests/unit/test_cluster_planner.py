"""Planner: affinity choices, constraints, and the config fragment it writes."""

from pathlib import Path

import yaml

from rollarc.cluster.catalogue import load_catalogue
from rollarc.cluster.fragment import PlacementFragment
from rollarc.cluster.inventory import load_inventory
from rollarc.cluster.planner import Planner
from rollarc.cluster.step_estimate import Placement, estimate
from rollarc.cluster.workload import load_workload
from rollarc.sim.plan_cli import main as plan_main

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "configs/cluster/mid_128.yaml"
WORKLOAD = REPO / "configs/cluster/workloads/moe30b_agentic.yaml"


def test_sync_estimate_is_the_sum_of_its_phases():
    catalogue = load_catalogue(REPO / "configs/cluster/hardware.yaml")
    workload = load_workload(WORKLOAD)
    p = Placement(
        "h800",
        16,
        {"h20": 64, "h800": 4},
        {"swe": "h20", "webqa": "h800", "math": "h20"},
        "cpu",
        4,
        "dedicated",
        "h800",
        2,
    )
    e = estimate(p, catalogue, workload, max_staleness=0)
    busiest = max([*e.rollout_s.values(), e.env_s, e.reward_s])
    assert e.step_time_s > max(busiest, e.tail_s) + e.train_s + e.sync_s
    assert estimate(p, catalogue, workload, max_staleness=1).step_time_s < e.step_time_s


def test_planner_respects_availability_and_budget():
    inventory, catalogue = load_inventory(CLUSTER)
    workload = load_workload(WORKLOAD)
    plan = Planner(inventory, catalogue, workload).plan()
    used = plan.placement.devices(catalogue, workload)
    assert all(n <= inventory.available[kind] for kind, n in used.items())
    cheap = Planner(inventory, catalogue, workload, budget_per_hour=60, objective="cost").plan()
    assert cheap.price_per_hour <= 60
    homogeneous = Planner(inventory, catalogue, workload).plan(homogeneous_only=True)
    assert len({homogeneous.placement.train_kind, *homogeneous.placement.rollout}) == 1
    assert plan.estimate.step_time_s <= homogeneous.estimate.step_time_s


def test_plan_cli_writes_a_valid_fragment(tmp_path, capsys):
    out = tmp_path / "fragment.yaml"
    assert plan_main(["--cluster", str(CLUSTER), "--workload", str(WORKLOAD), "--emit-config", str(out), "--json"]) == 0
    data = yaml.safe_load(out.read_text())
    assert set(data) == {"cluster", "tasks"}
    assert set(data["cluster"]) == {"pools", "roles"}
    assert set(data["cluster"]["roles"]) == {"train", "env", "reward", "rollout"}
    fragment = PlacementFragment.model_validate(data)
    assert {t.name for t in fragment.tasks} == {"swe", "webqa", "math"}
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = yaml.safe_load(last)
    assert result["plan"]["step_time_s"] > 0 and result["homogeneous"]["step_time_s"] > 0
    assert result["speedup_vs_homogeneous"] >= 1.0


def test_plan_cli_reports_bad_input(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text(
        yaml.safe_dump({"catalogue": str(REPO / "configs/cluster/hardware.yaml"), "available": {"b300": 8, "cpu": 1}})
    )
    assert plan_main(["--cluster", str(bad), "--workload", str(WORKLOAD)]) == 2
    assert "unknown device kind 'b300'" in capsys.readouterr().err


def test_planner_sends_long_prompts_to_compute_and_long_answers_to_bandwidth():
    """The shipped 30B workload on the 128-GPU inventory: the reassignment phase finds the affinity
    placement (a plan that grew from another assignment put swe on H800 and webqa on H20)."""
    inventory, catalogue = load_inventory(CLUSTER)
    workload = load_workload(WORKLOAD)
    planner = Planner(inventory, catalogue, workload)
    plan = planner.plan()
    assert plan.placement.task_kind == {"swe": "h20", "webqa": "h800", "math": "h20"}
    swapped = planner.evaluate(
        Placement(**{**plan.placement.__dict__, "task_kind": {"swe": "h800", "webqa": "h20", "math": "h20"}})
    )
    assert plan.estimate.step_time_s < swapped.estimate.step_time_s


def test_a_small_inventory_trains_on_fewer_than_a_node():
    inventory, catalogue = load_inventory(REPO / "configs/cluster/laptop_hetero.yaml")
    workload = load_workload(REPO / "configs/cluster/workloads/multitask_laptop.yaml")
    plan = Planner(inventory, catalogue, workload).plan()
    assert plan.placement.train_devices == 1 and plan.placement.train_kind == "h800"
    assert plan.placement.rollout == {"h800": 1, "h20": 1}
