"""Smoke test of ``rollarc bench weightsync --quick``: every case relayed bit-exactly, with bytes that follow the lr."""

from __future__ import annotations

import json
import math

from rollarc.bench import weightsync


def test_quick_benchmark_relays_every_case_bit_exactly_and_reports_its_bytes(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "benchmarks.md"))
    assert weightsync.main(["--quick", "--no-docs", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bit_exact"] is True
    for key in ("encode_gb_s", "decode_gb_s", "synthetic_changed_fraction", "peak_rss_gb"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    cases = {c["name"]: c for c in result["cases"]}
    assert {"configs/harvest.yaml", "fine-tuning lr, tiny (reference)"} <= set(cases)
    assert any(c["lr"] == 1e-6 and c["model"] == "qwen2-nano" for c in cases.values())  # the quick stand-in
    for c in cases.values():
        assert c["bit_exact"] is True and c["fp32_copy_bytes"] == 2 * c["dtype_copy_bytes"]  # bf16 sync
        # the site takes one copy, in 2 shards: the whole-model delta plus per-shard headers, at most a few kB
        assert c["whole_update_bytes_per_step"] <= c["cross_site_bytes_per_step"]
        assert c["cross_site_bytes_per_step"] <= c["whole_update_bytes_per_step"] + 16_000
        assert c["fp32_copy_over_cross_site"] == c["fp32_copy_bytes"] / c["cross_site_bytes_per_step"]
    # at the harvest config's lr (2e-4) nearly every bf16 weight changes: about a dense bf16 copy crosses
    assert 0.45 < cases["configs/harvest.yaml"]["cross_site_over_fp32_copy"] < 0.55
    # the same model at a fine-tuning lr sends far less
    assert cases["fine-tuning lr, tiny (reference)"]["dtype_copy_over_cross_site"] > 5
    assert list(tmp_path.iterdir()) == []  # a quick run writes nothing into docs


def test_arithmetic_text_is_deterministic_and_correct():
    text = weightsync.arithmetic_text(50, seed=3)
    assert text == weightsync.arithmetic_text(50, seed=3)
    for line in text.splitlines():
        lhs, rhs = line.split("=")
        op = next(c for c in "+*" if c in lhs) if any(c in lhs for c in "+*") else "-"
        a, b = lhs.split(op, 1)
        assert weightsync.apply_op(int(a), op, int(b)) == int(rhs)
