"""A real run keeps only its last checkpoints, and a resume passes over a damaged latest one (docs/failures.md)."""

from __future__ import annotations

import json

import pytest

from rollarc.models.checkpoint_digest import MANIFEST, verify_manifest
from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow


def test_retention_keeps_the_last_two_and_a_resume_falls_back_from_a_damaged_latest(nano_policy_dir, tmp_path, capsys):
    train = {"steps": 3, "keep_last_checkpoints": 2}
    assert run_training(config(nano_policy_dir, tmp_path, train=train)) == 0
    run = only_run(tmp_path)
    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000002", "step_000003"]
    assert all(verify_manifest(checkpoints / name) for name in ("step_000002", "step_000003"))

    weights = checkpoints / "step_000003" / "policy" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the latest checkpoint's weights
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    resumed = config(nano_policy_dir, tmp_path, resume=str(run), train={**train, "steps": 4})
    assert run_training(resumed) == 0

    reason = f"{weights} does not match its SHA-256 in {MANIFEST}"
    assert f"rollarc: checkpoint step_000003: {reason}; resuming from the previous one, step_000002\n" in (
        capsys.readouterr().err
    )
    assert [r["step"] for r in metrics(run)] == [1, 2, 3, 4]  # step 3 redone from step 2, once in the file
    (history,) = [json.loads(line) for line in (run / "config_history.jsonl").read_text().splitlines()]
    assert (history["checkpoint"], history["skipped_damaged"]) == ("step_000002", [f"step_000003: {reason}"])
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000003", "step_000004"]
    assert verify_manifest(checkpoints / "step_000003")  # rewritten whole by the resumed run
