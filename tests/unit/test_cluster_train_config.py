"""Planner to runtime: a plan applied to a base training config, validated, and the committed laptop plan."""

from pathlib import Path

import pytest
import yaml

from rollarc.cluster.fragment import PlacementFragment
from rollarc.cluster.inventory import load_inventory
from rollarc.cluster.planner import Planner
from rollarc.cluster.train_config import planned_config
from rollarc.cluster.workload import load_workload
from rollarc.config import load_train_config
from rollarc.config.io import ConfigError, read_yaml
from rollarc.sim.plan_cli import main as plan_main

REPO = Path(__file__).resolve().parents[2]
LAPTOP = REPO / "configs/cluster/laptop_hetero.yaml"
MULTITASK_WORKLOAD = REPO / "configs/cluster/workloads/multitask_laptop.yaml"
BASE = REPO / "configs/multitask.yaml"
PLANNED = REPO / "configs/multitask_planned.yaml"


def fragment(train_devices: int = 4) -> PlacementFragment:
    return PlacementFragment.model_validate(
        {
            "cluster": {
                "pools": {
                    "h800": {"count": train_devices + 2, "kind": "h800"},
                    "h20": {"count": 3, "kind": "h20"},
                    "cpu": {"count": 1, "kind": "cpu"},
                    "spare": {"count": 0, "kind": "h800"},
                },
                "roles": {
                    "train": {"pool": "h800", "replicas": train_devices},
                    "env": {"pool": "cpu", "replicas": 1},
                    "reward": {"pool": "spare", "replicas": 0},
                    "rollout": [{"pool": "h800", "replicas": 1, "units": 2}, {"pool": "h20", "replicas": 3}],
                },
            },
            "tasks": [
                {"name": "frozen_lake", "rollout_pool": "h800"},
                {"name": "countdown", "rollout_pool": "h20"},
                {"name": "guess", "rollout_pool": "h20"},
            ],
        }
    )


def test_plan_replaces_only_the_placement():
    base = read_yaml(BASE)
    out = planned_config(base, fragment(train_devices=4))
    assert out["cluster"]["pools"] == {
        "h800": {"count": 6, "kind": "h800"},
        "h20": {"count": 3, "kind": "h20"},
        "cpu": {"count": 1, "kind": "cpu"},
    }  # the empty pool is dropped
    roles = out["cluster"]["roles"]
    assert roles["train"] == {"pool": "h800", "replicas": 1, "units": 4, "threads": 1}  # one trainer over 4 devices
    assert roles["rollout"] == [
        {"pool": "h800", "replicas": 1, "units": 2, "threads": 1},
        {"pool": "h20", "replicas": 3, "units": 1, "threads": 1},
    ]
    assert roles["reward"] == {"pool": "cpu", "replicas": 0}
    assert [t["rollout_pool"] for t in out["tasks"]] == ["h800", "h20", "h20"]
    for key in ("name", "model", "sft", "train", "async", "algo", "engine", "plugin_paths"):
        assert out[key] == base[key], key
    assert [t["env"] for t in out["tasks"]] == [t["env"] for t in base["tasks"]]
    assert base["cluster"]["pools"] != out["cluster"]["pools"]  # the input is not modified in place


def test_tasks_must_match_by_name():
    base = read_yaml(BASE)
    base["tasks"] = base["tasks"][:2]
    names = r"\['countdown', 'frozen_lake'\] and the workload's tasks \['countdown', 'frozen_lake', 'guess'\]"
    with pytest.raises(ConfigError, match=names):
        planned_config(base, fragment())


def test_a_plan_the_runtime_cannot_run_is_refused():
    base = read_yaml(BASE)
    base["cluster"]["roles"]["train"]["threads"] = 0
    with pytest.raises(ConfigError, match=r"cluster\.roles\.train\.threads"):
        planned_config(base, fragment())


def test_committed_multitask_plan_is_what_the_planner_emits():
    """configs/multitask_planned.yaml must be regenerated whenever the base, workload or inventory changes."""
    inventory, catalogue = load_inventory(LAPTOP)
    workload = load_workload(MULTITASK_WORKLOAD)
    plan = Planner(inventory, catalogue, workload).plan()
    expected = planned_config(read_yaml(BASE), plan.fragment(catalogue, workload))
    assert yaml.safe_load(PLANNED.read_text()) == expected
    cfg = load_train_config(PLANNED)
    pools = {t.name: t.rollout_pool for t in cfg.tasks}
    assert pools == {"frozen_lake": "h800", "countdown": "h20", "guess": "h20"}  # prefill-heavy vs decode-heavy
    assert cfg.cluster.roles.train.replicas == 1


def test_plan_cli_emits_a_runnable_config(tmp_path, capsys):
    out = tmp_path / "planned.yaml"
    args = [
        "--cluster",
        str(LAPTOP),
        "--workload",
        str(MULTITASK_WORKLOAD),
        "--base",
        str(BASE),
        "--emit-config",
        str(out),
    ]
    assert plan_main(args) == 0
    assert out.read_text().startswith("# Written by: rollarc plan")
    assert load_train_config(out).cluster.pools["h20"].kind == "h20"
    assert plan_main(args[:-2]) == 2  # --base without --emit-config
    assert "--base needs --emit-config" in capsys.readouterr().err


def test_a_served_reward_keeps_its_own_pool():
    base = read_yaml(REPO / "configs/serverless_reward.yaml")
    lake = PlacementFragment.model_validate(
        {**fragment().model_dump(), "tasks": [{"name": "frozen_lake", "rollout_pool": "h20"}]}
    )
    out = planned_config(base, lake)
    assert out["cluster"]["pools"]["reward"] == base["cluster"]["pools"]["reward"]
    assert out["cluster"]["roles"]["reward"] == {"pool": "reward", "replicas": 0, "units": 1.0, "threads": 1}
    del base["cluster"]["pools"]["reward"]
    base["cluster"]["pools"]["cpu"]["count"] = 3  # env and the judge share the base's cpu pool
    base["cluster"]["roles"]["reward"]["pool"] = "cpu"
    with pytest.raises(ConfigError, match="reward role's pool 'cpu' is also a pool of the plan"):
        planned_config(base, lake)
