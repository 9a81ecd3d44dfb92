"""Smoke test of ``rollarc bench weightsync --quick``: it runs end to end and reports sane figures."""

from __future__ import annotations

import json
import math

import pytest

from rollarc.bench import weightsync

pytestmark = pytest.mark.slow  # starts Ray actors for the relay part


def test_quick_benchmark_reports_every_key_with_sane_values(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "benchmarks.md"))
    assert weightsync.main(["--quick", "--no-docs", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in (
        "changed_fraction",
        "bytes_ratio_lr1e-6",
        "bytes_ratio_lr1e-5",
        "encode_gb_s",
        "decode_gb_s",
        "cross_site_bytes_ratio",
        "synthetic_changed_fraction",
        "peak_rss_gb",
    ):
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert result["bit_exact"] is True
    assert 0 < result["changed_fraction"] < result["changed_fraction_lr1e-5"] < 1
    assert result["bytes_ratio_lr1e-6"] > result["bytes_ratio_lr1e-5"] > 1
    # 2 sites x 2 receivers: one copy per site instead of one per receiver, exactly.
    assert result["cross_site_bytes_ratio"] == pytest.approx(result["relay_receivers_per_site"])
    assert list(tmp_path.iterdir()) == []  # a quick run writes nothing into docs


def test_arithmetic_text_is_deterministic_and_correct():
    text = weightsync.arithmetic_text(50, seed=3)
    assert text == weightsync.arithmetic_text(50, seed=3)
    for line in text.splitlines():
        lhs, rhs = line.split("=")
        op = next(c for c in "+*" if c in lhs) if any(c in lhs for c in "+*") else "-"
        a, b = lhs.split(op, 1)
        assert weightsync.apply_op(int(a), op, int(b)) == int(rhs)
