"""``rollarc bench rose --train --quick``: both set-ups train, and the JSON has every key with its type."""

from __future__ import annotations

import json

import pytest

from rollarc.bench.rose import main
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)  # SFT warm start, then two 12-step nano runs (Ray each), one with a co-serving replica
def test_the_quick_training_path_benchmark_runs_both_setups(tmp_path, capsys):
    joined = f"cluster.address={shared_ray.address()}"  # the suite's shared cluster (tests/integration/shared_ray.py)
    assert main(["--train", "--quick", "--json", "--runs", str(tmp_path), joined]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = result["per_seed"]
    # both set-ups trained their 12 steps; only the one that lends ran turns on the borrowed pool
    assert result["steps"] == 12 and result["seeds"] == 1
    assert row["harvest"]["borrowed_turns"] > 0 and row["alone"]["borrowed_turns"] == 0
    assert result["borrowed_turns"] == {"harvest": [row["harvest"]["borrowed_turns"]], "alone": [0]}
    for setup in ("harvest", "alone"):
        assert row[setup]["rl_wall_s"] > 0 and row[setup]["trajectories_per_s"] > 0
        assert len(row[setup]["curve"]) == 13  # before RL and after each of the 12 steps (--eval-every 1)
    assert row["cross_site_bytes_per_step"] > 0 and result["cross_site_bytes_per_step"]["median"] > 0
    assert isinstance(result["trained_traj_s_ratio"]["median"], float)
    for key in ("median", "per_seed", "min", "max", "complete"):
        assert key in result["speedup_to_target_harvest"]
    for key in ("speedup", "low", "high", "grid_rel", "within_tolerance"):
        assert key in result["speedup_to_target_grid_bound"]
    assert isinstance(result["goal_met"], bool)
    assert isinstance(result["target"]["success"], float) and result["target"]["gain"] == 0.1
    assert set(result["guard_actions"]) == {"per_seed", "summed", "slo_caused"}
    assert set(result["slo"]) == {"per_seed", "ttft_p99_ms", "tpot_p99_ms"}
    # the derived SLO and the serving figures, as `rollarc train` records them in summary.json
    assert result["slo"]["ttft_p99_ms"] > 0 and result["slo"]["tpot_p99_ms"] > 0
    assert 0.0 <= result["slo_attainment_alone"] <= 1.0 and 0.0 <= result["slo_attainment_training"] <= 1.0
    assert isinstance(result["guard_actions"]["slo_caused"], int)
    # the load sampler runs under `rollarc bench` (machine_load.start), not when a test calls main: null here
    assert isinstance(result["commit"], str) and "machine_load" in result
    assert result["trace"] in ("azure_llm_2023_conv.csv", "synthetic")
