"""The GPU device check script: its CPU dry run runs every section, and without a GPU it stops in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_check.py"


def _run(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=False, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_exits_2_with_one_line(tmp_path: Path) -> None:
    result = _run([], tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.strip().count("\n") == 0 and "no CUDA device" in result.stderr and "--allow-cpu" in result.stderr
    )
    assert not (tmp_path / "device_check.json").exists()


@pytest.mark.slow
def test_cpu_dry_run_runs_every_section(tmp_path: Path) -> None:
    result = _run(["--allow-cpu", "--tiny"], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert report == json.loads(result.stdout)
    assert report["sections_failed"] == [] and report["forbidden_imports"] == []
    assert report["agreement"]["token_agreement"] >= 0.9  # bf16 engine vs bf16 HF generate: measured 1.0 here
    throughput = report["throughput"]
    assert throughput["useful_tokens"] > 0 and throughput["engine_tokens_per_s"] > 0
    assert throughput["hf_generate_tokens_per_s"] > 0
    grpo = report["grpo_step"]
    assert grpo["loss_finite"] and grpo["master_dtypes"] == ["torch.float32"] and len(grpo["steps"]) == 2
    assert report["codec"]["bitwise_exact"] and 0 < report["codec"]["changed_fraction"] < 1
    coserve = report["coserve"]
    assert coserve["serving_requests"] == coserve["alone"]["requests"] == coserve["coserving"]["requests"] > 0
    assert coserve["slo_ttft_p99_ms"] == pytest.approx(1.5 * coserve["alone"]["ttft_p99_ms"])
    assert 0 <= coserve["slo_attainment_coserving"] <= 1 and coserve["dedicated_tokens_per_s"] > 0
    assert set(coserve["guard_actions"]) >= {"pauses", "preemptions"}
    fsdp = report["fsdp2"]
    assert fsdp == "not available" or "error" not in fsdp
    step, sp = report["t2i"]["flow_grpo_step"], report["t2i"]["sp_regroup"]
    assert step["weights_on"] == step["trajectories_on"] == "cpu" and step["finite"] and step["max_weight_change"] > 0
    assert (sp["degree_before"], sp["degree_after"], sp["backend"], sp["staged_through_cpu"]) == (2, 1, "gloo", False)
    assert sp["max_abs_diff_degree_before"] < 1e-4 and sp["max_abs_diff_degree_after"] < 1e-4
    assert sp["checkpoint_reads_in_regroup"] == 0


def test_section_errors_are_recorded_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import device_check
    finally:
        sys.path.remove(str(SCRIPT.parent))

    def broken(_sizes: object, _device: object) -> dict:
        raise ValueError("boom")

    monkeypatch.setattr(device_check, "SECTIONS", {"agreement": broken, "fsdp2": lambda s, d: "not available"})
    report = device_check.run(device_check.TINY, torch.device("cpu"))
    assert report["agreement"]["error"] == "ValueError: boom" and report["sections_failed"] == ["agreement"]
    assert report["fsdp2"] == "not available"
