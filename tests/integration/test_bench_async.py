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
