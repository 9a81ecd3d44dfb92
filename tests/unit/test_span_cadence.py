"""When the controller collects spans: never between two phases of a synchronous step (the 0.1–0.3 s stalls)."""

from __future__ import annotations

from rollarc.runtime.span_cadence import EVERY_S, Collect, SpanCadence


def test_synchronous_collects_the_workers_once_per_training_window_and_never_between_phases():
    cadence = SpanCadence(synchronous=True, last_s=0.0)
    # between phases (a swap just ended, a publish just read): nothing, however long since the last collection
    assert cadence.due(100.0, version=3, training=False, rollout_only=False) is Collect.NOTHING
    assert cadence.due(100.0, version=3, training=True, rollout_only=False) is Collect.WORKERS
    assert cadence.due(100.1, version=3, training=True, rollout_only=False) is Collect.NOTHING  # once per step
    assert cadence.due(100.3, version=4, training=True, rollout_only=False) is Collect.WORKERS


def test_synchronous_collects_the_trainer_while_the_rollout_runs_at_most_every_interval():
    cadence = SpanCadence(synchronous=True, last_s=0.0)
    assert cadence.due(EVERY_S - 0.1, version=1, training=False, rollout_only=True) is Collect.NOTHING
    assert cadence.due(EVERY_S + 0.1, version=1, training=False, rollout_only=True) is Collect.TRAINER
    assert cadence.due(EVERY_S + 0.2, version=2, training=False, rollout_only=True) is Collect.NOTHING


def test_asynchronous_collects_everything_every_interval():
    cadence = SpanCadence(synchronous=False, last_s=0.0)
    assert cadence.due(1.0, version=1, training=True, rollout_only=False) is Collect.NOTHING
    assert cadence.due(EVERY_S + 1.0, version=1, training=True, rollout_only=False) is Collect.ALL
    assert cadence.due(EVERY_S + 2.0, version=2, training=True, rollout_only=False) is Collect.NOTHING
