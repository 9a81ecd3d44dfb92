"""Smoke test of `rollarc bench async --quick`: every mode runs and the JSON line has sane values.

One asynchronous bound (``--ks 2``): another k is the same mode with another number (the report's handling of several
is tested on recorded runs in tests/unit/test_bench_async_from_runs.py; k = 1 trains in test_bench_step and
test_async_runtime), so a second one would add a Ray start and no path. Likewise ``--no-split-sync``, as in every
published run: the split synchronous mode is ``sync_full`` with one thread per role (the mode list with it is
tested in tests/unit), and every sync run of the suite trains that way.
"""

from __future__ import annotations

import json
import math

import pytest

from rollarc.bench.async_ import main
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def test_quick_bench_reports_every_mode(tmp_path, capsys):
    assert (
        main(
            [
                "--quick",
                "--no-docs",
                "--ks",
                "2",
                "--no-split-sync",
                "--runs",
                str(tmp_path / "runs"),
                f"sft.checkpoint={tmp_path / 'sft'}",
                f"cluster.address={shared_ray.address()}",  # the suite's shared cluster (tests/integration/shared_ray.py)
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    modes = {"sync_full", "async_k2", "monolithic"}
    assert set(result["async_s"]) == {"2"} and "speedup_k1" not in result
    assert (result["sync_s"], result["speedup_k2"]) == (None, None)  # against the split sync mode, not run
    for key in ("monolithic_s", "speedup_k2_vs_monolithic"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert set(result["success"]) == modes and set(result["rl_wall_s"]) == modes
    assert all(0.0 <= v <= 1.0 for v in result["success"].values())
    # what each mode was given: the synchronous baseline gets every core of the compute pool and no correction
    setup = result["mode_setup"]
    assert setup["sync_full"]["threads"] == {"train": 2, "rollout": [2]} and setup["sync_full"]["correction"] == "none"
    assert "sync" not in setup
    assert setup["monolithic"]["correction"] == "tis" and setup["async_k2"]["max_staleness"] == 2
    workload = result["workload"]
    assert workload["config"] == "configs/longtail.yaml" and workload["latency_off"] is False
    assert workload["env_latency"] is True
    assert isinstance(workload["tail"], str) and "env latency lognormal" in workload["tail"]
    # time to target: one seed in quick mode; a value is a time or null (never reached), never made up
    assert result["seeds"] == 1 and result["eval_every"] == 1
    assert result["sync_modes"] == ["sync_full", "monolithic"]
    assert set(result["time_to_target_s"]) == modes
    assert result["target_source"].startswith("fallback")  # quick fixes no target
    for label, times in result["time_to_target_s"].items():
        bounds, steps = result["time_to_target_bounds_s"][label], result["steps_to_target"][label]
        assert len(times) == len(bounds) == len(steps) == 1
        if times[0] is None:
            assert bounds[0] is None and steps[0] is None
        else:
            lo, hi = bounds[0]
            assert 0.0 <= lo <= times[0] <= hi and isinstance(steps[0], int) and 0 <= steps[0] <= 2
    if result["target"] is None:
        assert all(t == [None] for t in result["time_to_target_s"].values())
        assert result["baseline_mode"] is None
    else:
        assert isinstance(result["target"], float)
        assert result["baseline_mode"] is None or result["baseline_mode"] in result["sync_modes"]
    assert set(result["baseline_speedups"]) == set(result["sync_modes"])
    for against, row in result["baseline_speedups"].items():
        assert against not in row and set(row) == set(result["time_to_target_s"]) - {against}
        assert all(v is None or (math.isfinite(v) and v > 0) for v in row.values())
    assert (result["speedup_to_target_k1"], result["speedup_to_target_k1_bounds"]) == (None, None)  # k = 1 not run
    for k in (2,):
        value, bounds = result[f"speedup_to_target_k{k}"], result[f"speedup_to_target_k{k}_bounds"]
        assert value is None or (math.isfinite(value) and value > 0)
        assert (value is None) == (bounds is None)
        if bounds is not None:
            assert bounds[0] <= value and (bounds[1] is None or value <= bounds[1])
    assert result["grid_error"] is None or result["grid_error"] >= 0.0
    assert isinstance(result["grid_error_over_limit"], bool) and result["grid_error_limit"] == 0.1
    assert set(result["eval_pause_gain_s"]) == set(result["time_to_target_s"])
    assert all(g is None or math.isfinite(g) for g in result["eval_pause_gain_s"].values())
    # what each mode trained: a map from mode to its median over seeds, from the runs' own metrics.jsonl
    for key in ("trained_success_mean", "trained_vs_admitted_length_ratio"):
        assert set(result[key]) == modes, key
    assert all(0.0 <= v <= 1.0 for v in result["trained_success_mean"].values())
    assert all(v is not None and v > 0 for v in result["trained_vs_admitted_length_ratio"].values())
