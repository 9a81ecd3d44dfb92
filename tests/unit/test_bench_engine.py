"""Smoke test of ``rollarc bench engine --quick --no-docs``: it runs all three engines and reports sane figures."""

from __future__ import annotations

import json
import math

from rollarc.bench import engine as bench_engine


def test_quick_engine_bench_reports_all_keys(capsys) -> None:
    assert bench_engine.main(["--quick", "--no-docs", "--requests", "12"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    for key in (
        "rollarc_tok_s",
        "hf_generate_tok_s",
        "hf_generate_batch_tok_s",
        "ratio_vs_hf_generate",
        "ratio_vs_hf_generate_batch",
    ):
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert result["ratio_vs_hf_generate"] == result["rollarc_tok_s"] / result["hf_generate_tok_s"]
    assert result["requests"] == 12 and result["useful_tokens"] > 0


def test_workload_is_long_tailed_and_reproducible() -> None:
    a = bench_engine.make_workload(400, (8, 512), (16, 64), 0.1, 8, vocab_size=102, seed=0)
    b = bench_engine.make_workload(400, (8, 512), (16, 64), 0.1, 8, vocab_size=102, seed=0)
    assert a == b
    assert all(8 <= len(p) <= 512 and all(6 <= t < 102 for t in p) for p in a.prompts)
    long = [m for m in a.max_tokens if m > 64]
    assert 20 <= len(long) <= 60 and all(128 <= m <= 512 and m % 8 == 0 for m in long)
    assert all(16 <= m <= 64 for m in a.max_tokens if m <= 64)
