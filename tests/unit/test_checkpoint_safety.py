"""Checkpoints from disk: no unpickling, a manifest checked on resume with a fallback, retention, a full disk.

The disk is filled for real: a subprocess lowers RLIMIT_FSIZE, so its writes fail with EFBIG (handled as
ENOSPC is) exactly where a full disk would fail them.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ray.exceptions import RayTaskError
from torch.distributed.checkpoint.state_dict import get_state_dict

from rollarc.config.io import ConfigError
from rollarc.models.checkpoint import UnsafeCheckpoint, check_state_files, load_state_file, save_state_file
from rollarc.models.checkpoint_digest import MANIFEST, DamagedCheckpoint, verify_manifest
from rollarc.models.checkpoint_retention import prune_checkpoints
from rollarc.models.checkpoint_write import DiskFull, checkpoint_directory, full_disk_errno
from rollarc.report.run_dir import RunDirError, read_metrics, truncate_metrics
from rollarc.runtime.resume import HISTORY, prepare_resume, record_new_run
from tests.unit.test_resume_check import cfg

REPO = Path(__file__).resolve().parents[2]


class _Touch:
    """Unpickling this creates ``marker``: what an attacker's object would do, harmlessly."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def write_checkpoint(checkpoints: Path, step: int, payload: bytes = b"weights") -> Path:
    path = checkpoints / f"step_{step:06d}"
    with checkpoint_directory(path) as tmp:
        (tmp / "policy").mkdir()
        (tmp / "policy" / "model.safetensors").write_bytes(payload * 100)
        save_state_file(
            {"version": step, "generator": torch.Generator().manual_seed(step).get_state()}, tmp / "trainer_state.pt"
        )
        (tmp / "state.json").write_text(json.dumps({"version": step}))
    return path


def run_with(tmp_path: Path, steps: list[int]) -> Path:
    run = tmp_path / "run"
    for step in steps:
        write_checkpoint(run / "checkpoints", step)
    record_new_run(run, cfg())
    return run


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---- no unpickling ---------------------------------------------------------------------------------------
def test_a_trainer_state_holding_a_pickled_object_is_refused_in_one_line_and_never_runs(tmp_path):
    run = run_with(tmp_path, [2])
    marker = tmp_path / "code-ran"
    state = run / "checkpoints" / "step_000002" / "trainer_state.pt"
    torch.save({"version": 2, "payload": _Touch(marker)}, state)
    (run / "checkpoints" / "step_000002" / MANIFEST).unlink()  # a copied-in run: no manifest to catch it
    with pytest.raises(UnsafeCheckpoint) as refused:
        prepare_resume(cfg(run))
    assert str(refused.value) == (
        f"{state} holds pickled objects other than tensors and plain data; rollarc does not load it (it could "
        "run code): use a checkpoint written by rollarc"
    )
    with pytest.raises(UnsafeCheckpoint):  # the trainer actor's own load (trainer recovery)
        load_state_file(state)
    assert not marker.exists()
    assert not list(run.glob("config.resume-*.yaml"))  # refused before anything is recorded


def test_an_fsdp_checkpoint_index_is_read_with_only_what_dcp_writes(tmp_path):
    """torch DCP unpickles ``sharded/.metadata`` with plain pickle: a resume reads it first, restricted."""
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters())
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp_path / "sharded"))
    check_state_files(tmp_path)  # what DCP writes passes
    marker = tmp_path / "code-ran"
    index = tmp_path / "sharded" / ".metadata"
    index.write_bytes(pickle.dumps({"storage": _Touch(marker)}))
    with pytest.raises(UnsafeCheckpoint) as refused:
        check_state_files(tmp_path)
    assert str(refused.value) == (
        f"{index} holds pickled objects DCP does not write (pathlib.Path.touch); rollarc does not load it "
        "(it could run code)"
    )
    assert not marker.exists()


def test_trainer_state_round_trips_bit_exactly_through_weights_only_loading(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    generator = torch.Generator().manual_seed(7)
    saved = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "version": 4}
    saved["generator"] = generator.get_state()
    save_state_file(saved, tmp_path / "trainer_state.pt")
    loaded = load_state_file(tmp_path / "trainer_state.pt")
    assert torch.equal(loaded["generator"], generator.get_state()) and loaded["version"] == 4
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(loaded["optimizer"]["state"][0][key], saved["optimizer"]["state"][0][key])
    assert loaded["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]
    assert loaded["scheduler"]["_last_lr"] == saved["scheduler"]["_last_lr"]


# ---- manifest and fallback -------------------------------------------------------------------------------
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path):
    run = run_with(tmp_path, [1, 2])
    weights = run / "checkpoints" / "step_000002" / "policy" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[10] ^= 0x01
    weights.write_bytes(bytes(data))
    said: list[str] = []
    point = prepare_resume(cfg(run), say=said.append)
    reason = f"{weights} does not match its SHA-256 in {MANIFEST}"
    assert (point.checkpoint.name, point.state) == ("step_000001", {"version": 1})
    assert said == [f"rollarc: checkpoint step_000002: {reason}; resuming from the previous one, step_000001"]
    history = json.loads((run / HISTORY).read_text().splitlines()[-1])
    assert (history["checkpoint"], history["skipped_damaged"]) == ("step_000001", [f"step_000002: {reason}"])


def test_a_missing_file_or_a_truncated_state_file_is_damage(tmp_path):
    run = run_with(tmp_path, [1, 2, 3])
    (run / "checkpoints" / "step_000003" / "policy" / "model.safetensors").unlink()
    state = run / "checkpoints" / "step_000002" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:40])
    (run / "checkpoints" / "step_000002" / MANIFEST).unlink()  # unverified: only torch can tell
    said: list[str] = []
    assert prepare_resume(cfg(run), say=said.append).checkpoint.name == "step_000001"
    assert said[0].startswith("rollarc: checkpoint step_000003: ") and said[0].endswith(
        "model.safetensors is missing (listed in manifest.json); resuming from the previous one, step_000001"
    )
    assert said[1].startswith(f"rollarc: checkpoint step_000002: {state} cannot be read (")


def test_no_intact_checkpoint_is_one_line_and_an_old_one_without_manifest_loads_unverified(tmp_path):
    run = run_with(tmp_path, [1])
    weights = run / "checkpoints" / "step_000001" / "policy" / "model.safetensors"
    weights.write_bytes(b"x" * weights.stat().st_size)
    with pytest.raises(ConfigError) as refused:
        prepare_resume(cfg(run), say=lambda line: None)
    assert str(refused.value) == (
        f"resume={run}: no intact checkpoint under {run / 'checkpoints'}: step_000001: {weights} does not match "
        f"its SHA-256 in {MANIFEST}"
    )
    (run / "checkpoints" / "step_000001" / MANIFEST).unlink()
    said: list[str] = []
    assert prepare_resume(cfg(run), say=said.append).checkpoint.name == "step_000001"
    assert said == ["rollarc: step_000001 has no manifest.json (an older rollarc wrote it): loaded unverified"]


def test_the_manifest_lists_every_file_and_an_edited_manifest_is_damage(tmp_path):
    path = write_checkpoint(tmp_path / "checkpoints", 1)
    listed = json.loads((path / MANIFEST).read_text())["files"]
    assert sorted(listed) == ["policy/model.safetensors", "state.json", "trainer_state.pt"]
    assert verify_manifest(path) is True
    (path / MANIFEST).write_text("{")
    with pytest.raises(DamagedCheckpoint, match=r"manifest.json is not a readable manifest \(JSONDecodeError\)$"):
        verify_manifest(path)


# ---- retention -------------------------------------------------------------------------------------------
def test_retention_keeps_exactly_the_last_n_and_never_the_one_just_written(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for step in range(1, 6):
        write_checkpoint(checkpoints, step)
    (checkpoints / ".step_000006.tmp-1a2b3c4d").mkdir()  # a save in progress elsewhere: not ours to delete
    assert prune_checkpoints(checkpoints, 0, checkpoints / "step_000005") == []
    deleted = prune_checkpoints(checkpoints, 2, checkpoints / "step_000005")
    assert [p.name for p in deleted] == ["step_000001", "step_000002", "step_000003"]
    assert names(checkpoints) == [".step_000006.tmp-1a2b3c4d", "step_000004", "step_000005"]
    # resumed from step 4 after step 5 was found damaged: step 5 (newer, about to be overwritten) is left alone
    write_checkpoint(checkpoints, 3)
    assert prune_checkpoints(checkpoints, 1, checkpoints / "step_000003") == []
    assert names(checkpoints) == [".step_000006.tmp-1a2b3c4d", "step_000003", "step_000004", "step_000005"]
    assert prune_checkpoints(checkpoints, 1, checkpoints / "step_000005") == [
        checkpoints / "step_000003",
        checkpoints / "step_000004",
    ]
    assert names(checkpoints) == [".step_000006.tmp-1a2b3c4d", "step_000005"]


# ---- a full disk -----------------------------------------------------------------------------------------
def on_a_small_disk(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh Python (it sets its own RLIMIT_FSIZE: never this test process's)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=True,
    )


FILL_DISK = """
import resource, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from rollarc.models.checkpoint import save_state_file
from rollarc.models.checkpoint_write import DiskFull, checkpoint_directory, full_disk_errno
from tests.unit.test_checkpoint_safety import write_checkpoint

checkpoints = Path(sys.argv[1])
write_checkpoint(checkpoints, 1)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
big = {"w": torch.zeros(1 << 16)}
try:
    with checkpoint_directory(checkpoints / "step_000002") as tmp:
        (tmp / "state.json").write_text("{}")
        if sys.argv[2] == "weights":
            save_file(big, str(tmp / "model.safetensors"))
        else:
            save_state_file(big, tmp / "trainer_state.pt")
except DiskFull as err:
    print(err.message)
"""


@pytest.mark.parametrize("writer", ["weights", "trainer_state"])
def test_a_full_disk_while_checkpointing_is_one_line_and_the_last_checkpoint_stays_intact(tmp_path, writer):
    checkpoints = tmp_path / "run" / "checkpoints"
    out = on_a_small_disk(FILL_DISK, str(checkpoints), writer)
    assert out.stdout.splitlines() == [
        f"disk full (EFBIG) while writing checkpoint step_000002 under {checkpoints}; the last complete checkpoint "
        f"step_000001 is intact; free space and resume with resume={tmp_path / 'run'}"
    ]
    assert names(checkpoints) == ["step_000001"]  # the temporary directory is gone
    assert verify_manifest(checkpoints / "step_000001") is True


def test_disk_full_raised_in_the_trainer_keeps_its_one_line_through_ray():
    wrapped = RayTaskError(
        "save_checkpoint", "Traceback ...\nDiskFull: disk full", DiskFull("disk full")
    ).as_instanceof_cause()
    assert isinstance(wrapped, DiskFull) and wrapped.message == "disk full"
    # t2i: the driver owns the directory, the trainer's own OSError arrives wrapped
    lost = OSError(errno.ENOSPC, "No space left on device")
    assert full_disk_errno(RayTaskError("save", "Traceback ...", lost).as_instanceof_cause()) == errno.ENOSPC


# ---- metrics.jsonl and timeline.jsonl --------------------------------------------------------------------
def metrics_file(run: Path, steps: int) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    path = run / "metrics.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "reward": s / 10, "pad": "x" * 200}) + "\n" for s in range(1, steps + 1))
    )
    return path


def test_a_torn_last_metrics_line_is_dropped_by_the_resume_truncation(tmp_path):
    path = metrics_file(tmp_path / "run", 3)
    path.write_text(path.read_text() + '{"step": 4, "rew')  # the stopped run crashed mid-append
    truncate_metrics(tmp_path / "run", 4)
    assert [m.step for m in read_metrics(tmp_path / "run")] == [1, 2, 3]
    path.write_text(path.read_text().replace('"step": 2', '"step": 2,,'))  # damage in the middle: one line
    with pytest.raises(RunDirError) as bad:
        truncate_metrics(tmp_path / "run", 4)
    assert str(bad.value) == f"{path}, line 2: not valid JSON (Expecting property name enclosed in double quotes)"


TRUNCATE_ON_A_FULL_DISK = """
import resource, sys
from pathlib import Path
from rollarc.report.run_dir import truncate_metrics

resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 12, 1 << 12))
try:
    truncate_metrics(Path(sys.argv[1]), 100)
except OSError as err:
    print(err.strerror)
"""


def test_truncation_replaces_the_file_whole_or_not_at_all(tmp_path):
    run = tmp_path / "run"
    path = metrics_file(run, 30)  # ~7 KB: more than the 4 KB the subprocess may write
    before, inode = path.read_bytes(), path.stat().st_ino
    out = on_a_small_disk(TRUNCATE_ON_A_FULL_DISK, str(run))
    assert out.stdout.splitlines() == ["File too large"]
    assert path.read_bytes() == before and names(run) == ["metrics.jsonl"]  # old file whole, no temporary left
    truncate_metrics(run, 10)
    assert [m.step for m in read_metrics(run)] == list(range(1, 11))
    assert path.stat().st_ino != inode  # a new file renamed over the old one, not a rewrite in place
