"""Smoke test of `rollarc bench reward --quick --no-docs`: it runs all set-ups and reports sane figures.

The benchmark starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): it
starts Ray Serve, whose detached controller would outlive the run on a shared cluster.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from rollarc.bench.reward import MODES, main
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rewards.judge import JudgeSpec, ProgressJudge, save_judge, tokenizer_fingerprint

pytestmark = pytest.mark.slow


def test_quick_bench_reports_every_set_up(tmp_path, capsys):
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    spec = JudgeSpec(
        vocab_size=len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        context_tokens=32,
        d_model=16,
        heads=2,
        layers=1,
        tokenizer_sha256=tokenizer_fingerprint(tokenizer.get_vocab()),
    )
    judge = save_judge(ProgressJudge(spec), tmp_path / "judge", {})
    assert main(["--quick", "--no-docs", "--json", "--model", str(judge)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("replica_s", "p99_latency_s", "p50_latency_s", "mean_wait_s"):
        assert set(result[key]) == set(MODES)
        assert all(math.isfinite(v) and v > 0 for v in result[key].values()), key
    assert result["failed"] == {m: 0 for m in MODES}
    assert result["cost_ratio_serverless_vs_peak"] == pytest.approx(
        result["replica_s"]["serverless"] / result["replica_s"]["dedicated_peak"]
    )
    assert result["pool_sizes"]["dedicated_peak"] >= result["pool_sizes"]["dedicated_mean"] >= 1
    assert result["cold_start"]["cold_start_s"] > result["cold_start"]["warm_s"] > 0
    assert result["capacity_per_replica"] > 0 and result["real_model"]["capacity_per_replica"] > 0
    assert result["arrivals"]["count"] > 0
