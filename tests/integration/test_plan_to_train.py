"""Planner to runtime on local Ray: plan the multitask job, emit a config, train it, check the routing.

The run starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): the planned
pools are GPU kinds (h800, h20), logical resources on a local cluster but real GPUs on a joined one, which this
machine lacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollarc.config import load_train_config
from rollarc.runtime.entry import run_training
from rollarc.sim.plan_cli import main as plan_main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_planned_multitask_config_trains_and_routes_by_the_plan(nano_policy_dir, tmp_path, capsys):
    planned = tmp_path / "planned.yaml"
    assert (
        plan_main(
            [
                "--cluster",
                str(REPO / "configs/cluster/laptop_hetero.yaml"),
                "--workload",
                str(REPO / "configs/cluster/workloads/multitask_laptop.yaml"),
                "--base",
                str(REPO / "configs/multitask.yaml"),
                "--emit-config",
                str(planned),
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    pools = {t["name"]: t["rollout_pool"] for t in plan["plan"]["fragment"]["tasks"]}
    assert len(set(pools.values())) == 2  # a heterogeneous plan: two rollout pools

    # The emitted file as it is; the overrides only shrink the job and point at a tiny (256-position) policy.
    cfg = load_train_config(
        planned,
        [
            f"model.path={nano_policy_dir}",
            "tasks.1.agent.context_limit=256",
            f"plugin_paths=[{REPO / 'examples'}]",
            f"run.dir={tmp_path / 'runs'}",
            "run.progress=false",
            "run.tensorboard=false",
            "train.steps=2",
            "train.groups_per_step=4",
            "train.group_size=2",
            "train.eval_every=0",
            "train.eval_episodes=4",
            "train.checkpoint_every=0",
            "cluster.num_cpus=2",
            "tasks.0.agent.max_turns=4",
            "tasks.1.agent.max_turns=2",
            "tasks.2.agent.max_turns=2",
        ],
    )
    assert {t.name: t.rollout_pool for t in cfg.tasks} == pools
    assert run_training(cfg) == 0

    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    routing = summary["routing"]
    turns = routing["turns"]
    tokens = routing["tokens"]
    assert set(summary["task_profiles"]) == set(pools)
    for task, pool in pools.items():
        assert turns.get(f"{task}@{pool}", 0) > 0, (task, turns)
    off_plan = sum(n for key, n in turns.items() if key.split("@")[1] != pools[key.split("@")[0]])
    # Only stolen turns leave their pool (a stolen first turn keeps its trajectory's later turns there).
    max_turns = {t.name: t.agent.max_turns for t in cfg.tasks}
    assert off_plan <= routing["stolen_turns"] * max(max_turns.values())
    on_plan_tokens = sum(n for key, n in tokens.items() if key.split("@")[1] == pools[key.split("@")[0]])
    assert on_plan_tokens > 0
    assert (run / "task_profiles.json").is_file()
