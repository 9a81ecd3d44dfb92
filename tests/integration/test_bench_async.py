"""Smoke test of `rollarc bench async --quick`: every mode runs and the JSON line has sane values."""

from __future__ import annotations

import json
import math

import pytest

from rollarc.bench.async_ import main

pytestmark = pytest.mark.slow


def test_quick_bench_reports_every_mode(tmp_path, capsys):
    assert (
        main(
            [
                "--quick",
                "--no-docs",
                "--ks",
                "1,2",
                "--runs",
                str(tmp_path / "runs"),
                f"sft.checkpoint={tmp_path / 'sft'}",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result["async_s"]) == {"1", "2"}
    for key in ("sync_s", "monolithic_s", "speedup_k1", "speedup_k2"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert set(result["success"]) == {"sync", "async_k1", "async_k2", "monolithic"}
    assert all(0.0 <= v <= 1.0 for v in result["success"].values())
    # time to target: one seed in quick mode; a value is a time or null (never reached), never made up
    assert result["seeds"] == 1
    assert set(result["time_to_target_s"]) == {"sync", "async_k1", "async_k2"}
    for times in result["time_to_target_s"].values():
        assert len(times) == 1 and (times[0] is None or times[0] > 0)
    if result["target_success"] is None:
        assert all(t == [None] for t in result["time_to_target_s"].values())
    else:
        assert result["time_to_target_s"]["sync"][0] is not None  # sync reaches the target it sets
    for k in (1, 2):
        value = result[f"speedup_to_target_k{k}"]
        assert value is None or (math.isfinite(value) and value > 0)
    # what each mode trained: a map from mode to its median over seeds, from the runs' own metrics.jsonl
    for key in ("trained_success_mean", "trained_vs_admitted_length_ratio"):
        assert set(result[key]) == {"sync", "async_k1", "async_k2"}, key
    assert all(0.0 <= v <= 1.0 for v in result["trained_success_mean"].values())
    assert all(v is not None and v > 0 for v in result["trained_vs_admitted_length_ratio"].values())
