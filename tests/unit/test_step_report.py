"""The step's metrics record (rollarc/runtime/step_report.py): rates, memory maxima and what the trainer adds."""

from __future__ import annotations

from rollarc.runtime.run_counters import Counters
from rollarc.runtime.step_report import mean_dicts, step_record


def _record(step_time: float, train: dict) -> dict:
    return step_record(
        3,
        train,
        {"generated_tokens": 10, "trajectories": 4, "reward": 0.5},
        step_time,
        0.25,
        1.5,
        run_start=0.0,
        sync_bytes=1024,
        buffer_groups=2,
        in_flight_groups=5,
        rollout_rss=[100.0, 300.0],
        env_rss=[],
        counters=Counters(groups_trained=8),
    )


def test_rates_are_per_second_of_the_step_and_zero_for_a_zero_length_step():
    record = _record(2.0, {"train_s": 1.25, "loss": 0.75, "lr": 3e-4, "rows": 16, "note": "text"})
    assert (record["gen_tok_s"], record["trajectories_per_s"]) == (5.0, 2.0)
    assert (record["sync_s"], record["train_sync_s"], record["sync_bytes"]) == (0.25, 1.5, 1024)
    assert (record["buffer_groups"], record["in_flight_groups"]) == (2, 5)
    assert (record["rss_mb_rollout"], record["rss_mb_env"]) == (300.0, 0.0)
    assert (record["train_s"], record["loss"], record["grad_norm"], record["reward"]) == (1.25, 0.75, None, 0.5)
    assert (record["lr"], record["rows"], record["groups_trained"]) == (3e-4, 16, 8)
    assert "note" not in record and "failure_reasons" not in record
    stopped = _record(0.0, {})
    assert (stopped["gen_tok_s"], stopped["trajectories_per_s"], stopped["tokens"]) == (0.0, 0.0, 0)


def test_mean_dicts_averages_each_key():
    assert mean_dicts([]) == {}
    assert mean_dicts([{"s": 1.0, "bytes": 10.0}, {"s": 3.0, "bytes": 30.0}]) == {"s": 2.0, "bytes": 20.0}
