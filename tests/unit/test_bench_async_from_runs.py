"""``rollarc bench async --from-runs``: the figures read back from recorded run folders are the ones the
measured run had, and the publication carries the measured run's own commit and machine load."""

import json
from pathlib import Path

import pytest

from rollarc.bench import async_
from rollarc.bench.async_modes import curve_modes, modes
from rollarc.bench.async_runs import META_FILE, read_run, reread_runs
from rollarc.bench.report_file import publish


def _run(home: Path, rl_wall_s: float, evals: list[tuple[int, float]], trained: int = 128) -> None:
    run = home / "r-20261201-000000"
    run.mkdir(parents=True)
    summary = {
        "rl_window": [100.0, 100.0 + rl_wall_s],
        "rl_wall_s": rl_wall_s,
        "trajectories_trained": trained,
        "heldout_success_before_rl": evals[0][1],
        "heldout_success_after_rl": evals[-1][1],
        "dropped_stale_groups": 0,
        "failed_trajectories": 0,
        "bubble_fraction": {"rollout": 0.5, "train": 0.5},
        "evals": [
            {"label": "before_rl" if v == 0 else f"step_{v}", "version": v, "success": s, "episodes": 200, "seconds": 0}
            for v, s in evals
        ],
    }
    (run / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": v, "wall_s": 100.0 + 10.0 * v} for v in range(1, 5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _layout(root: Path, seeds: int) -> None:
    for s in range(seeds):
        suffix = "" if s == 0 else f"_s{s}"
        _run(root / f"sync{suffix}", 40.0, [(0, 0.4), (2, 0.5), (4, 0.6)])
        _run(root / f"async_k1{suffix}", 20.0, [(0, 0.4), (2, 0.45), (4, 0.6)])
        _run(root / f"async_k2{suffix}", 10.0, [(0, 0.4), (2, 0.6), (4, 0.6)])
    _run(root / "async_k4", 8.0, [(0, 0.4), (4, 0.5)])


def test_read_run_excludes_nothing_it_should_not(tmp_path: Path) -> None:
    _run(tmp_path / "sync", 40.0, [(0, 0.4), (2, 0.5), (4, 0.6)])
    r = read_run(tmp_path / "sync")
    assert r["rl_wall_s"] == 40.0
    assert r["trajectories_per_s"] == 128 / 40.0
    # held-out success against RL wall time: step v ends at 10 v s after the RL start
    assert r["curve"] == [(0.0, 0.4), (20.0, 0.5), (40.0, 0.6)]


def test_reread_counts_complete_seeds_only(tmp_path: Path) -> None:
    _layout(tmp_path, seeds=3)
    _run(tmp_path / "sync_s3", 40.0, [(0, 0.4), (4, 0.6)])  # a fourth seed that only sync has: not a seed
    results, seeded, seeds = reread_runs(tmp_path, [1, 2, 4])
    assert seeds == 3
    assert sorted(results) == ["async_k1", "async_k2", "async_k4", "sync"]  # a root from before sync_full
    assert [len(c) for c in seeded.values()] == [3, 3, 3]
    assert seeded["async_k2"][2]["curve"] == [(0.0, 0.4), (20.0, 0.6), (40.0, 0.6)]
    assert seeded["async_k2"][2]["steps"] == [0, 2, 4]


def test_from_runs_rebuilds_the_figures(tmp_path: Path, capsys) -> None:
    _layout(tmp_path / "runs", seeds=3)
    (tmp_path / "runs" / META_FILE).write_text(json.dumps({"commit": "abc1234", "machine_load": None}))
    assert async_.main(["--from-runs", str(tmp_path / "runs"), "--no-docs"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["seeds"] == 3
    assert result["sync_s"] == 40.0 and result["async_s"] == {"1": 20.0, "2": 10.0, "4": 8.0}
    # no --target: the labelled fallback, 0.4 + 0.8 * (0.6 - 0.4) = 0.56, interpolated between evaluations:
    # sync 20 + 0.06 / 0.1 * 20 = 32 s, k = 1 20 + 0.11 / 0.15 * 20 = 34.67 s, k = 2 0.16 / 0.2 * 20 = 16 s
    assert abs(result["target"] - 0.56) < 1e-12 and result["target_source"].startswith("fallback")
    assert result["baseline_mode"] == "sync" and result["sync_modes"] == ["sync"]
    assert abs(result["speedup_to_target_k2"] - 2.0) < 1e-9
    assert abs(result["speedup_to_target_k1"] - 32 / (20 + 0.11 / 0.15 * 20)) < 1e-9
    assert result["steps_to_target"] == {"sync": [4] * 3, "async_k1": [4] * 3, "async_k2": [2] * 3}
    assert result["time_to_target_bounds_s"]["sync"] == [[20.0, 40.0]] * 3
    assert result["workload"]["config"] == "configs/longtail.yaml" and result["workload"]["latency_off"] is False


def test_publish_carries_the_recorded_meta(tmp_path: Path) -> None:
    recorded = {"commit": "abc1234", "machine_load": {"quiet": False, "other_cpu_share": 0.4}}
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    publish(
        "async",
        "body",
        {"x": 1.0},
        "rollarc bench async --from-runs r",
        quick=False,
        no_docs=False,
        page=page,
        meta=recorded,
    )
    written = json.loads((tmp_path / "docs" / "benchmarks" / "async.json").read_text())
    assert written["commit"] == "abc1234"
    assert written["machine_load"] == recorded["machine_load"]
    assert "at commit `abc1234`" in page.read_text()


def test_from_runs_without_a_record_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    _layout(tmp_path, seeds=1)
    try:
        async_.main(["--from-runs", str(tmp_path)])
    except SystemExit as e:
        assert e.code == 2
    assert f"no {META_FILE}" in capsys.readouterr().err


def test_in_flight_variants_run_as_their_own_modes_and_get_their_own_speed_up(tmp_path: Path, capsys) -> None:
    """``--in-flight abort`` adds ``async_k2_abort`` (same k, turns cut by an update resume on the new weights),
    over as many seeds as k = 2, with its time to target against the same synchronous runs."""
    assert modes([2], monolithic=False, in_flight=["abort"]) == [
        ("sync", ["async.mode=sync", "async.max_staleness=0"]),
        ("sync_full", ["async.mode=sync", "async.max_staleness=0", "algo.correction=none"]),
        ("async_k2", ["async.mode=async", "async.max_staleness=2"]),
        ("async_k2_abort", ["async.mode=async", "async.max_staleness=2", "async.in_flight_update=abort"]),
    ]
    assert curve_modes([2, 4], ["abort"]) == ["sync", "sync_full", "monolithic", "async_k2", "async_k2_abort"]
    root = tmp_path / "runs"
    for s in range(2):
        suffix = "" if s == 0 else f"_s{s}"
        _run(root / f"sync{suffix}", 40.0, [(0, 0.4), (2, 0.5), (4, 0.6)])
        _run(root / f"async_k2{suffix}", 10.0, [(0, 0.4), (2, 0.6), (4, 0.6)])
        _run(root / f"async_k2_abort{suffix}", 16.0, [(0, 0.4), (2, 0.45), (4, 0.6)])
    (root / META_FILE).write_text(json.dumps({"commit": "abc1234", "machine_load": None}))
    argv = ["--from-runs", str(root), "--ks", "2", "--in-flight", "abort", "--no-docs"]
    assert async_.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # target 0.4 + 0.8 * 0.2 = 0.56; step v ends 10 v s into RL: sync at 32 s, k = 2 at 16 s, abort at 34.67 s
    assert result["seeds"] == 2
    abort = 20 + 0.11 / 0.15 * 20
    assert result["speedup_to_target"] == {"async_k2": 2.0, "async_k2_abort": pytest.approx(32 / abort)}
    assert result["speedup_to_target_k2"] == 2.0
    assert result["rl_wall_s"] == {"sync": 40.0, "async_k2": 10.0, "async_k2_abort": 16.0}


def test_a_target_fixed_before_the_runs_is_used_and_stated(tmp_path: Path, capsys) -> None:
    _layout(tmp_path / "runs", seeds=1)
    (tmp_path / "runs" / META_FILE).write_text(json.dumps({"commit": "abc1234", "machine_load": None}))
    assert async_.main(["--from-runs", str(tmp_path / "runs"), "--no-docs", "--target", "0.5"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # 0.5 is sync's evaluation at step 2 (20 s) exactly; k = 2 crosses 0.1 / 0.2 of the way to 20 s
    assert result["target"] == 0.5 and result["target_source"] == "--target, fixed before the runs"
    assert result["time_to_target_s"]["sync"] == [20.0] and result["time_to_target_s"]["async_k2"] == [10.0]
    # a pilot's published JSON (old key target_success) fixes it too, and names where it came from
    pilot = tmp_path / "pilot.json"
    pilot.write_text(json.dumps({"target_success": 0.45, "commit": "1ef4d1f"}))
    assert async_.main(["--from-runs", str(tmp_path / "runs"), "--no-docs", "--target-from", str(pilot)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["target"] == 0.45 and "1ef4d1f" in result["target_source"]


def test_bad_options_and_an_unnamed_variant_or_workload_are_one_line_errors(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    other = tmp_path / "other.yaml"
    for argv, message in (
        (["--in-flight", "later", "--no-docs"], "--in-flight later"),
        (["--in-flight", "abort"], "--publish-as"),  # it would overwrite the headline async.json
        (["--target", "1.5", "--no-docs"], "--target 1.5"),
        (["--target", "0.5", "--target-from", str(empty), "--no-docs"], "give one"),
        (["--target-from", str(tmp_path / "missing.json"), "--no-docs"], "no such file"),
        (["--target-from", str(empty), "--no-docs"], "no numeric 'target'"),
        (["--config", str(other)], "--publish-as"),  # it would overwrite the headline async.json
    ):
        try:
            async_.main(argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} was accepted")
        assert message in capsys.readouterr().err


def test_help_renders(capsys) -> None:
    """Regression: a percent sign in a help string broke --help (argparse formats help with %)."""
    try:
        async_.main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    assert "grid error under 10 % on configs/longtail.yaml" in " ".join(capsys.readouterr().out.split())
