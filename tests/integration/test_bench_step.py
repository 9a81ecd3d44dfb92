"""Smoke test of `rollarc bench step --quick`: the three modes run and the JSON line carries every key."""

from __future__ import annotations

import json
import math

import pytest

from rollarc.bench.step import main
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def test_quick_step_bench_reports_every_mode(tmp_path, capsys):
    argv = [
        "--quick",
        "--no-docs",
        "--steps",
        "2",
        "--runs",
        str(tmp_path / "runs"),
        f"sft.checkpoint={tmp_path / 'sft'}",
        f"cluster.address={shared_ray.address()}",  # the suite's shared cluster (tests/integration/shared_ray.py)
    ]
    assert main([*argv, "sft.steps=5", "sft.episodes=50", "train.eval_episodes=4"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    modes = {"sync", "async_k1", "inprocess"}
    assert set(result["completions_per_s"]) == modes == set(result["phase_s"]) == set(result["success"])
    assert all(math.isfinite(v) and v > 0 for v in result["completions_per_s"].values())
    cps = result["completions_per_s"]
    assert result["ratio_sync_vs_inprocess"] == pytest.approx(cps["sync"] / cps["inprocess"])
    assert result["ratio_async_vs_inprocess"] == pytest.approx(cps["async_k1"] / cps["inprocess"])
    assert {"rollout_s", "train_s", "sync_s"} <= set(result["phase_s"]["sync"])
    assert {"generate_s", "train_s"} <= set(result["phase_s"]["inprocess"])
    assert all(0.0 <= v <= 1.0 for v in result["success"].values())
    assert result["completions_per_step"] == 64 and result["steps"] == 2
    (seed,) = result["per_seed"]  # --quick runs one seed; the medians are that seed's figures
    assert seed["seed"] == 0 and result["seeds"] == 1
    assert result["ratio_sync_vs_inprocess_seeds"]["per_seed"] == [seed["ratio_sync_vs_inprocess"]]
    assert cps == {m: r["completions_per_s"] for m, r in seed["modes"].items()}
    # the phase split explains the sync ratio: each mode's phases add up to its mean step, so do the differences
    split = result["phase_split"]
    phases = ["start_s", "generate_s", "score_s", "to_train_s", "train_s", "publish_s", "sync_s", "other_s"]
    for mode in ("inprocess", "sync"):
        assert sum(split[mode][p] for p in phases) == pytest.approx(split[mode]["step_s"])
        assert split[mode]["generate_s"] > 0 and split[mode]["train_s"] > 0
    assert split["inprocess"]["publish_s"] == split["inprocess"]["sync_s"] == 0.0  # its sampler is the trained model
    assert split["sync"]["sync_s"] > 0
    diff = split["sync_minus_inprocess"]
    assert diff["step_s"] == pytest.approx(split["sync"]["step_s"] - split["inprocess"]["step_s"])
    assert result["phase_split"]["ratio_from_steps"] == pytest.approx(
        split["inprocess"]["step_s"] / split["sync"]["step_s"]
    )
    assert "phase_split" not in seed["modes"]["async_k1"]  # the chain of links is the synchronous step's
