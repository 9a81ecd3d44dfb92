"""``rollarc bench chaos --quick``: a run that loses one actor of every role still finishes, and loses nothing."""

from __future__ import annotations

import json

import pytest

from rollarc.bench import chaos

pytestmark = pytest.mark.slow


def test_kill_schedule_kills_every_role_once_inside_the_run():
    assert chaos.kill_schedule(6) == [("env", 1), ("rollout", 2), ("router", 3), ("train", 4)]
    assert chaos.kill_schedule(30) == [("env", 7), ("rollout", 14), ("router", 21), ("train", 28)]


def test_latency_trace_is_heavy_tailed_with_rare_hangs(tmp_path):
    path = chaos.write_latency_trace(tmp_path / "trace.txt", seed=0, n=20_000)
    delays = [float(line) for line in path.read_text().splitlines() if not line.startswith("#")]
    hangs = sum(d == chaos.HANG_S for d in delays)
    assert 20 <= hangs <= 60  # 0.2 % of 20,000 = 40
    ordinary = sorted(d for d in delays if d != chaos.HANG_S)
    assert 0.009 < ordinary[len(ordinary) // 2] < 0.011  # median 10 ms
    assert ordinary[int(0.99 * len(ordinary))] > 0.2  # p99 ~ 0.33 s: a heavy tail


def test_quick_chaos_run_finishes_without_losing_trajectories(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "docs" / "benchmarks.md"))
    code = chaos.main(["--quick", "--json", "--runs", str(tmp_path / "runs"), f"sft.checkpoint={tmp_path / 'sft'}"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["crashed"] is False, result["error"]
    assert result["seeds"] == [0]
    kills = result["per_seed"][0]["kills"]
    assert [k["role"] for k in kills] == ["env", "rollout", "router", "train"]
    assert not [k for k in kills if k["actor"].startswith("not killed")], kills
    assert all(n >= 1 for n in result["restarts"].values()), result["restarts"]
    assert result["trainer_losses"] >= 1 and result["steps_lost"] <= result["trainer_losses"]
    assert result["trajectories_lost"] == 0
    assert result["trajectories_started"] > 0 and result["steps"] == 6
    # --quick runs the chaos run alone (compare() is unit-tested on given runs): the clean side is null, not made up
    assert (result["heldout_success_clean"], result["clean_crashed"], result["success_gap"]) == (None, None, None)
    assert result["per_seed"][0]["rl_wall_s"]["clean"] is None and result["per_seed"][0]["rl_wall_s"]["chaos"] > 0
    assert not (tmp_path / "docs").exists()  # --quick publishes nothing


def test_the_chaos_latency_replaces_the_configs_own_whatever_its_kind(tmp_path):
    """Regression: a config with its own latency (longtail's lognormal) clashed with the chaos run's ``kind: trace``."""
    from rollarc.config import load_train_config

    trace = chaos.write_latency_trace(tmp_path / "trace.txt", seed=0, n=100)
    cfg = load_train_config("configs/longtail.yaml", [*chaos.SHARED, *chaos.chaos_overrides(trace)])
    latency = cfg.tasks[0].latency
    assert (latency.kind, latency.trace_path, latency.median_s, latency.sigma) == ("trace", trace, None, None)
    assert (latency.failure_prob, latency.failure_retries) == (0.02, 2)
