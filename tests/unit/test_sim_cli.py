"""The simulate command and the sim benchmark, end to end on short runs."""

import json
import math
from pathlib import Path

from rollarc.bench.sim import main as bench_main
from rollarc.sim.cli import main as simulate_main

REPO = Path(__file__).resolve().parents[2]


def test_simulate_with_baseline_prints_ratios(capsys, tmp_path):
    code = simulate_main(
        [
            str(REPO / "configs/sim/rollarc_128.yaml"),
            "steps=2",
            "--baseline",
            str(REPO / "configs/sim/monolithic_h800_128.yaml"),
            "--timeline",
            str(tmp_path / "run"),
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["scenario"]["steps"] == 2 and out["baseline"]["mode"] == "sync"
    assert out["speedup"] > 0 and math.isfinite(out["speedup"])
    assert set(out["scenario"]["pools"]) == {"h800", "h20", "cpu"}
    for pool in out["scenario"]["pools"].values():
        assert 0 <= pool["busy_fraction"] <= 1 and abs(pool["busy_fraction"] + pool["bubble_fraction"] - 1) < 1e-9
    assert (tmp_path / "run" / "timeline.jsonl").stat().st_size > 0
    assert simulate_main(["--calibrate", str(tmp_path / "run")]) == 0


def test_simulate_reports_a_bad_scenario(capsys):
    assert simulate_main([str(REPO / "configs/sim/rollarc_128.yaml"), "mode=fast"]) == 2
    assert "mode" in capsys.readouterr().err


def test_bench_sim_quick(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "benchmarks.md"))
    assert bench_main(["--quick"]) == 0
    assert list(tmp_path.iterdir()) == []  # a --quick run never writes into docs
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("events_per_s", "wall_s", "speedup", "step_time_s", "baseline_step_time_s", "trajectories"):
        assert math.isfinite(out[key]) and out[key] > 0, key
    assert out["gpus"] == 3072
