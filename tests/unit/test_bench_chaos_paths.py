"""``rollarc bench chaos --path harvest|spot`` without Ray: which path a config is on, the kill order, the reports
from summaries, the spot queue's ledger across a restart, where a lost t2i trainer restarts, lost serving."""

from __future__ import annotations

from collections import Counter

import pytest

from rollarc.bench import chaos, chaos_harvest, chaos_path, chaos_spot
from rollarc.config.io import ConfigError
from rollarc.diffusion.queue_ledger import QueueLedger
from rollarc.diffusion.trainer_loss import TrainerLost, restart_point
from rollarc.runtime.harvest_pool import serving_unfinished
from rollarc.spotlight.job_queue import JobSpec


def test_the_path_is_read_from_the_config():
    assert chaos_path.path_of("configs/harvest.yaml") == "harvest"
    assert chaos_path.path_of("configs/t2i_spot.yaml") == "spot"
    assert chaos_path.path_of("configs/quickstart.yaml") == "llm"
    with pytest.raises(ConfigError) as err:
        chaos_path.path_of("configs/t2i_quickstart.yaml")
    assert str(err.value) == (
        "configs/t2i_quickstart.yaml: a t2i config without spot.enabled has no chaos run; use configs/t2i_spot.yaml"
    )


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


def test_every_role_of_each_path_is_killed_once_inside_the_run():
    assert chaos.kill_schedule(8, chaos_harvest.ROLES) == [
        ("env", 1),
        ("rollout", 2),
        ("coserving", 4),
        ("router", 5),
        ("train", 6),
    ]
    assert chaos.kill_schedule(12, chaos_spot.ROLES) == [("spot", 3), ("queue", 7), ("trainer", 10)]


def test_the_harvest_report_counts_restarts_losses_and_serving_from_the_summary():
    summary = {
        "steps": 8,
        "env_worker_restarts": 1,
        "router_restarts": 1,
        "trainer_restarts": 1,
        "rollout_restarts": 3,
        "steps_lost": 0,
        "trajectories": {"started": 80, "failed": 2, "cancelled": 8, "retried": 4, "lost": 0},
        "harvest": {"deaths": 2, "replacements": 2, "served": 120, "serving_lost": 3, "lends": 5, "withdrawals": 4},
    }
    kills = [{"role": "coserving", "actor": "borrowed-0", "after_step": 4, "t_s": 1.0}]
    got = chaos_harvest.report({"crashed": False, "error": None, "summary": summary, "steps_planned": 8}, kills)
    assert got["restarts"] == {"env": 1, "rollout": 3, "coserving": 2, "router": 1, "train": 1}
    assert (got["trajectories_started"], got["trajectories_lost"], got["trajectories_duplicated"]) == (80, 0, 0)
    assert (got["serving_served"], got["serving_lost"], got["coserving_deaths"]) == (120, 3, 2)
    assert chaos_harvest.duplicated({"lost": -2}) == 2  # a ledger that ends more than it started


def test_the_spot_report_takes_lost_and_duplicate_jobs_from_the_spot_summary():
    summary = {
        "steps": 8,
        "trainer_restarts": 1,
        "spot": {
            "submitted": 16,
            "completed": 16,
            "lost_jobs": 0,
            "duplicate_jobs": 0,
            "crashes": 1,
            "queue_restarts": 1,
            "redone_on_queue_loss": 2,
            "preemptions": 0,
        },
    }
    got = chaos_spot.report({"crashed": False, "error": None, "summary": summary, "steps_planned": 8}, [])
    assert got["restarts"] == {"spot": 1, "queue": 1, "trainer": 1}
    assert (got["jobs_submitted"], got["lost_jobs"], got["duplicate_jobs"], got["redone_on_queue_loss"]) == (
        16,
        0,
        0,
        2,
    )


def _jobs(ids: range) -> list[JobSpec]:
    return [JobSpec(i, f"prompt {i}", (i,), 1, 4) for i in ids]


def test_the_queue_ledger_refills_a_restarted_queue_and_sums_its_counts():
    ledger = QueueLedger()
    ledger.launched(_jobs(range(4)))
    for version in (1, 2, 3):
        ledger.put(version, version - 1, [f"update{version}", f"full{version}"])
    ledger.collected.update({0, 1})
    first = {"submitted": 4, "completed": 3, "lost_jobs": 1, "duplicate_jobs": 0, "heartbeats": 10, "sync_bytes": 7}
    assert ledger.read(first) == {**first, "queue_restarts": 0, "redone_on_queue_loss": 0}  # none lost: its own
    weights, jobs = ledger.restarted()
    assert weights == [(2, 1, ["update2", "full2"]), (3, 2, ["update3", "full3"])]  # the last two versions
    assert [j.job_id for j in jobs] == [2, 3]  # launched, not collected: job 2 was done, but never handed over
    ledger.collected.update({2, 3})
    second = {"submitted": 2, "completed": 2, "lost_jobs": 0, "duplicate_jobs": 0, "heartbeats": 4, "sync_bytes": 5}
    got = ledger.read(second)
    assert (got["submitted"], got["completed"], got["lost_jobs"], got["duplicate_jobs"]) == (4, 4, 0, 0)
    assert (got["heartbeats"], got["sync_bytes"], got["queue_restarts"], got["redone_on_queue_loss"]) == (14, 12, 1, 2)


def test_a_lost_t2i_trainer_restarts_from_the_checkpoint_of_its_step(tmp_path):
    step = tmp_path / "checkpoints" / "step_000003"
    step.mkdir(parents=True)
    (step / "state.json").write_text("{}")
    assert restart_point(tmp_path, 3, 0) == step
    assert restart_point(tmp_path, 0, 0) is None  # the run's start: its own starting policy
    with pytest.raises(TrainerLost) as err:
        restart_point(tmp_path, 5, 0)
    assert str(err.value) == (
        "the t2i trainer was lost training step 6 and step 5 has no checkpoint to restart it from: "
        "set run.checkpoint_every: 1 to survive a trainer loss, or resume the run with --resume"
    )


def test_serving_requests_a_dead_replica_had_not_finished_are_counted_lost():
    assert serving_unfinished(Counter(serving_requests=12, served=9)) == 3
    assert serving_unfinished(Counter()) == 0  # a replica that never reported


def test_the_killers_pace_is_the_shortest_of_the_last_three_steps():
    """Regression: the median of a run whose early steps a preemption trace slowed (10 s, 8 s) was 2.4 s, so a kill
    meant for partway into step 11 waited 1.2 s and landed after the last two 0.6 s steps."""
    times = [10.2, 0.6, 0.9, 3.7, 8.7, 1.6, 3.2, 0.6, 5.6, 0.62]
    rows = [{"step": i + 1, "step_s": t} for i, t in enumerate(times)]
    assert chaos.recent_pace(rows[::-1]) == 0.6  # order-free: the last three by step are 0.6, 5.6, 0.62
    assert chaos.recent_pace([{"step": 1, "step_time_s": 2.5}]) == 2.5  # the LLM path's key
    assert chaos.recent_pace([*rows[:2], {"step": 3, "step_s": 0.9}]) == 0.6


def test_the_chaos_latency_replaces_the_configs_own_whatever_its_kind(tmp_path):
    """Regression: a config with its own latency (longtail's lognormal) clashed with the chaos run's ``kind: trace``."""
    from rollarc.config import load_train_config

    trace = chaos.write_latency_trace(tmp_path / "trace.txt", seed=0, n=100)
    cfg = load_train_config("configs/longtail.yaml", [*chaos.SHARED, *chaos.chaos_overrides(trace)])
    latency = cfg.tasks[0].latency
    assert (latency.kind, latency.trace_path, latency.median_s, latency.sigma) == ("trace", trace, None, None)
    assert (latency.failure_prob, latency.failure_retries) == (0.02, 2)
