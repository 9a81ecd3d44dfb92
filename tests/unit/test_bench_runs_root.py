"""``--runs ROOT`` filled over several invocations (rollarc/bench/runs_root.py): finished runs are reused,
interrupted ones train again, and a root of another commit or other overrides is refused."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rollarc.bench import async_, runs_root


def _run(home: Path, status: str = "completed", rl_wall_s: float = 40.0) -> Path:
    run = home / "r-20261202-000000"
    run.mkdir(parents=True)
    summary = {
        "status": status,
        "rl_window": [100.0, 100.0 + rl_wall_s],
        "rl_wall_s": rl_wall_s,
        "trajectories_trained": 128,
        "heldout_success_before_rl": 0.4,
        "heldout_success_after_rl": 0.6,
        "dropped_stale_groups": 0,
        "failed_trajectories": 0,
        "evals": [{"label": "before_rl", "version": 0, "success": 0.4, "episodes": 200, "seconds": 0}],
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "wall_s": 10.0}) + "\n")
    return run


def test_only_a_completed_run_is_finished(tmp_path: Path) -> None:
    _run(tmp_path / "done")
    _run(tmp_path / "stopped", status="stopped")
    (tmp_path / "no_summary" / "r-1").mkdir(parents=True)
    assert runs_root.finished(tmp_path / "done")
    assert not runs_root.finished(tmp_path / "stopped")
    assert not runs_root.finished(tmp_path / "no_summary")
    assert not runs_root.finished(tmp_path / "missing")


def test_unfinished_runs_are_discarded_and_finished_ones_kept(tmp_path: Path) -> None:
    _run(tmp_path / "done")
    _run(tmp_path / "stopped", status="stopped")
    assert not runs_root.discard_unfinished(tmp_path / "done")
    assert (tmp_path / "done").is_dir()
    assert runs_root.discard_unfinished(tmp_path / "stopped")
    assert not (tmp_path / "stopped").exists()


def test_a_finished_run_is_read_not_trained(tmp_path: Path, capsys) -> None:
    _run(tmp_path / "sync", rl_wall_s=40.0)
    # a config path that does not exist: training would fail on it, reading does not need it
    r = async_.run_mode(str(tmp_path / "absent.yaml"), [], "sync", tmp_path)
    assert r["rl_wall_s"] == 40.0
    assert "reusing the finished run" in capsys.readouterr().out


def test_a_root_of_another_commit_or_other_overrides_is_refused(tmp_path: Path) -> None:
    meta = runs_root.open_root(tmp_path, "abc1234", ["train.steps=100"])
    runs_root.record(tmp_path, meta, "sync", {"other_cpu_share": 0.0, "own_cpu_share": 0.9, "wall_s": 10.0})
    with pytest.raises(runs_root.RootMismatch, match="commit abc1234"):
        runs_root.open_root(tmp_path, "def5678", ["train.steps=100"])
    with pytest.raises(runs_root.RootMismatch, match="other overrides"):
        runs_root.open_root(tmp_path, "abc1234", ["train.steps=50"])
    again = runs_root.open_root(tmp_path, "abc1234", ["train.steps=100"])
    assert [s["trained"] for s in again["sessions"]] == [["sync"], []]


def test_bench_async_refuses_a_mismatched_root_in_one_line(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    meta = runs_root.open_root(runs, "0000000", [])
    runs_root.record(runs, meta, None, None)
    with pytest.raises(SystemExit) as exit_info:
        async_.main(["--quick", "--runs", str(runs), f"sft.checkpoint={tmp_path / 'sft'}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "holds runs of commit 0000000" in err


def test_the_load_over_sessions_is_weighted_by_wall_time() -> None:
    quiet = {"other_cpu_share": 0.02, "own_cpu_share": 0.9, "wall_s": 300.0}
    noisy = {"other_cpu_share": 0.30, "own_cpu_share": 0.6, "wall_s": 100.0}
    load = runs_root.combined_load([quiet, None, noisy])
    # (0.02 * 300 + 0.30 * 100) / 400 = 0.09; (0.9 * 300 + 0.6 * 100) / 400 = 0.825
    assert load == {"other_cpu_share": 0.09, "own_cpu_share": 0.825, "wall_s": 400.0, "quiet": True, "sessions": 2}
    assert runs_root.combined_load([None]) is None


def test_export_copies_what_a_later_sitting_reads_and_it_is_reused(tmp_path: Path, capsys) -> None:
    root, dest = tmp_path / "root", tmp_path / "records"
    meta = runs_root.open_root(root, "abc1234", [f"sft.checkpoint={root / 'sft'}", "train.steps=100"])
    runs_root.record(root, meta, "sync", {"other_cpu_share": 0.0, "own_cpu_share": 0.9, "wall_s": 10.0})
    (root / "sft").mkdir()
    (root / "sft" / "model.safetensors").write_bytes(b"\x01\x02weights")
    done = _run(root / "sync", rl_wall_s=40.0)
    (done / "timeline.jsonl").write_text("{}\n" * 1000)
    (done / "checkpoints" / "v100").mkdir(parents=True)
    _run(root / "async_k1", status="stopped")
    assert runs_root.export_records(root, dest) == ["sync"]
    copied = dest / "sync" / done.name
    assert sorted(p.name for p in copied.iterdir()) == ["metrics.jsonl", "summary.json"]
    assert (copied / "summary.json").read_bytes() == (done / "summary.json").read_bytes()
    assert not (dest / "async_k1").exists()
    assert (dest / "sft" / "model.safetensors").read_bytes() == b"\x01\x02weights"
    # the next sitting: the records copied back to the same ROOT path, same commit and overrides
    shutil.rmtree(root)
    shutil.copytree(dest, root)
    assert runs_root.open_root(root, "abc1234", meta["overrides"])["commit"] == "abc1234"
    r = async_.run_mode(str(tmp_path / "absent.yaml"), [], "sync", root)
    assert r["rl_wall_s"] == 40.0
    assert "reusing the finished run" in capsys.readouterr().out


def test_export_refuses_a_folder_that_is_no_root(tmp_path: Path) -> None:
    with pytest.raises(runs_root.RootMismatch, match=r"no bench_meta\.json"):
        runs_root.export_records(tmp_path / "nothing", tmp_path / "dest")
    meta = runs_root.open_root(tmp_path / "r", "abc1234", [])
    runs_root.record(tmp_path / "r", meta, None, None)
    with pytest.raises(runs_root.RootMismatch, match="onto itself"):
        runs_root.export_records(tmp_path / "r", tmp_path / "r")


def test_an_export_into_an_ignored_folder_is_noticed(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("runs/\n")
    (tmp_path / "docs" / "runs" / "x").mkdir(parents=True)
    (tmp_path / "docs" / "records" / "x").mkdir(parents=True)
    assert runs_root.git_ignored(tmp_path / "docs" / "runs" / "x")
    assert not runs_root.git_ignored(tmp_path / "docs" / "records" / "x")
