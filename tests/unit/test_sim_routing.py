"""Affinity vs random routing in the simulator, and ``rollarc simulate --from-run``."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from rollarc.cluster.distributions import Constant
from rollarc.cluster.engine_cost import LinearEngine
from rollarc.sim.cli import main as simulate_main
from rollarc.sim.setup import PoolBilling, RolloutPoolSetup
from rollarc.sim.simulator import simulate
from rollarc.sim.toy import toy_setup

REPO = Path(__file__).resolve().parents[2]


def engine(decode_base_s: float) -> LinearEngine:
    return LinearEngine(
        prefill_per_token_s=0.001,
        request_overhead_s=0.0,
        decode_base_s=decode_base_s,
        decode_per_seq_s=0.0,
        decode_per_ctx_token_s=0.0,
        kv_capacity_tokens=float("inf"),
        max_batch=64,
    )


def two_pools(routing: str, groups: int = 1, steps: int = 1, engines: int = 2, group_size: int = 2):
    """Task ``fast`` on pool ``p1`` (10 ms per decode iteration), task ``slow`` on ``p2`` (20 ms)."""
    base = toy_setup(
        groups=groups,
        group_size=group_size,
        steps=steps,
        env_latency=Constant(value=0.0),
        reward_latency=Constant(value=0.0),
    )
    toy = base.tasks[0]
    tasks = [replace(toy, name="fast", rollout_pool="p1"), replace(toy, name="slow", rollout_pool="p2")]
    pools = {**base.pools, "p1": PoolBilling("p1", "p1", 1, 1.0), "p2": PoolBilling("p2", "p2", 1, 1.0)}
    rollout = [RolloutPoolSetup("p1", engines, engine(0.01)), RolloutPoolSetup("p2", engines, engine(0.02))]
    return replace(base, tasks=tasks, rollout=rollout, groups_per_step=2 * groups, pools=pools, routing=routing)


def test_affinity_routing_keeps_each_task_on_its_pool_with_known_time():
    result = simulate(two_pools("affinity", engines=1))
    # 2 trajectories × (10 prompt + 100 new tokens) per task, one engine per pool. The slow pool:
    # two 10-token prefills of 0.01 s (each stalls decoding) + 100 iterations × 0.02 s = 2.02 s; then
    # train 2 s + 0.001 s per token over 4 × 110 tokens, then sync 0.3 s.
    assert result.generated_by_task_pool == {"fast@p1": 200.0, "slow@p2": 200.0}
    assert result.step_time_s == pytest.approx(2.02 + 2.0 + 0.44 + 0.3)


def test_random_routing_spreads_tasks_over_pools_and_does_the_same_work():
    # Task-oblivious routing is the runtime's least-loaded choice over every replica (ties by name). The
    # task mix alternates fast and slow groups; with 2 trajectories per group on 2 engines per pool, each
    # task would land on one pool by coincidence, so groups of 3 trajectories are used here.
    affinity = simulate(two_pools("affinity", groups=20, steps=2, group_size=3))
    random = simulate(two_pools("random", groups=20, steps=2, group_size=3))
    routed = random.generated_by_task_pool
    assert set(routed) == {"fast@p1", "fast@p2", "slow@p1", "slow@p2"}
    assert sum(routed.values()) == pytest.approx(sum(affinity.generated_by_task_pool.values()))
    assert random.routing == "random" and affinity.routing == "affinity"


def _write_profiles(run: Path) -> Path:
    def s(x):
        return {"mean": x, "p50": x, "p90": x, "p99": x, "n": 50}

    def task(prompt, new, turns):
        return {
            "turns": s(turns),
            "prompt_tokens_per_turn": s(prompt),
            "new_tokens_per_turn": s(new),
            "cached_tokens": s(0),
            "env_step_s": s(0.05),
            "reward_s": {"n": 0},
            "trajectory_s": s(1.0),
            "ok": 50,
            "failed": 0,
            "success": 10,
        }

    run.mkdir()
    (run / "task_profiles.json").write_text(
        json.dumps(
            {
                "tasks": {"read": task(3000, 20, 3), "think": task(200, 2000, 1)},
                "groups_per_step": 8,
                "group_size": 4,
                "max_staleness": 1,
                "weights": {"read": 1, "think": 1},
                "rollout_pools": {"read": "compute", "think": "bandwidth"},
            }
        )
    )
    return run


def test_from_run_compares_affinity_and_random_routing(tmp_path, capsys):
    run = _write_profiles(tmp_path / "run")
    assert simulate_main(["--from-run", str(run), "--steps", "3", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])
    assert any(line.startswith("affinity vs random routing: speed-up") for line in lines)
    pools = {row["task"]: row["pool"] for row in report["tasks"]}
    assert {row["task"]: row["class"] for row in report["tasks"]} == {"read": "prefill-heavy", "think": "decode-heavy"}
    assert set(report["affinity"]["generated_by_task_pool"]) == {f"{t}@{p}" for t, p in pools.items()}
    assert report["speedup"] == pytest.approx(report["random"]["step_time_s"] / report["affinity"]["step_time_s"])
    assert math.isfinite(report["speedup"]) and report["speedup"] > 0
    assert report["batch"] == {"groups_per_step": 8, "group_size": 4, "max_staleness": 1}
    for routing in ("affinity", "random"):
        assert report[routing]["trajectories"] == 3 * 8 * 4
        assert set(report[routing]["pools"]) == set(report["placement"]["cluster"]["pools"])


def test_from_run_without_profiles_is_a_clear_error(tmp_path, capsys):
    assert simulate_main(["--from-run", str(tmp_path)]) == 2
    assert "task_profiles.json does not exist" in capsys.readouterr().err


def test_from_workload_runs_the_same_comparison_on_a_workload_file(capsys):
    workload = str(REPO / "configs/cluster/workloads/moe30b_agentic.yaml")
    assert simulate_main(["--from-workload", workload, "--steps", "2", "--groups-per-step", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["batch"]["groups_per_step"] == 8 and report["model"] == "moe-30b-a3b"
    assert {row["task"] for row in report["tasks"]} == {"swe", "webqa", "math"}
    assert report["random"]["routing"] == "random" and report["speedup"] > 0
    assert simulate_main(["--from-workload", workload, "--workload-model", workload]) == 2
    assert "--workload-model applies to --from-run" in capsys.readouterr().err
