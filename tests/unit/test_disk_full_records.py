"""A full disk while a run writes its own records is one line naming the file and the resume, not a traceback
(regression: a full disk outside a checkpoint write, a metrics append or summary.json, was a traceback)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rollarc.cli import _guarded
from rollarc.report.disk_full import DiskFull
from rollarc.report.disk_full_guard import run_record
from rollarc.report.metrics import MetricsWriter
from rollarc.report.run_dir import METRICS

DEV_FULL = Path("/dev/full")  # Linux: every write fails with ENOSPC


def test_a_metrics_append_on_a_full_disk_is_disk_full_naming_the_file_and_the_resume(tmp_path):
    assert DEV_FULL.exists(), "these tests need Linux's /dev/full"
    (tmp_path / METRICS).symlink_to(DEV_FULL)
    writer = MetricsWriter(tmp_path, tensorboard=False)
    with pytest.raises(DiskFull) as caught:
        writer.log(3, {"success": 0.5})
    assert caught.value.message == (
        f"disk full (ENOSPC) while writing metrics.jsonl in {tmp_path}; its checkpoints and the records written "
        f"before are intact; free space and resume with resume={tmp_path}"
    )


def test_only_a_full_disk_is_turned_into_disk_full(tmp_path):
    summary = tmp_path / "summary.json"
    with pytest.raises(DiskFull, match=r"disk full \(EDQUOT\) while writing summary.json"), run_record(summary):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")
    with pytest.raises(PermissionError), run_record(summary):  # not a full disk: passes as it is
        raise PermissionError(errno.EACCES, "Permission denied")


def test_the_cli_prints_disk_full_as_one_line_and_exits_1(capsys):
    def run() -> int:
        raise DiskFull("disk full (ENOSPC) while writing summary.json in /runs/x; ... resume with resume=/runs/x")

    assert _guarded(run) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "rollarc: disk full (ENOSPC) while writing summary.json in /runs/x; ... resume with resume=/runs/x"
    ]
