"""Asynchrony is real, read off the run's own records: rollout overlaps training, and stale tokens are trained.

A latency-injected tiny workload (scripted env behind a long-tailed step delay) runs with k = 2. From the run
directory alone: ``timeline.jsonl`` must show generate spans overlapping training spans, and ``metrics.jsonl``
(the trainer's per-batch token staleness) must show trained tokens at least one version old and none older than
k (older tokens of a group are masked out of the loss and counted). The same checks run on a synchronous run must fail: there, rollout and training alternate and every token
is fresh, so a runtime that silently ran synchronously could not pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow

K = 2
LATENCY = {"kind": "lognormal", "median_s": 0.05, "sigma": 1.0, "max_s": 1.0}


def spans(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines()]


def overlap_s(run: Path) -> float:
    """Seconds of (generate span, training span) overlap, summed over all pairs."""
    everything = spans(run)
    generate = [(s["t0"], s["t1"]) for s in everything if s["role"] == "rollout" and s["kind"] == "generate"]
    train = [(s["t0"], s["t1"]) for s in everything if s["role"] == "train" and s["kind"] == "train"]
    assert generate and train, "the timeline must hold both generate and training spans"
    return sum(max(0.0, min(g1, t1) - max(g0, t0)) for g0, g1 in generate for t0, t1 in train)


def assert_asynchronous(run: Path, k: int) -> None:
    rows = metrics(run)
    assert overlap_s(run) > 0.0, "no rollout overlapped training"
    assert max(r["token_staleness_max"] for r in rows) >= 1, "no trained token was older than its step's policy"
    for r in rows:
        assert 0 <= r["token_staleness_min"] <= r["token_staleness_max"] <= k, r  # every trained token
        # A group may hold tokens older than k (it is dropped only when none is fresh); those are masked out of
        # the loss and counted, never trained.
        assert r["staleness_max"] <= k or r["masked_stale_tokens"] > 0, r


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_rollout_overlaps_training_and_stale_tokens_stay_in_bound(nano_policy_dir, tmp_path, mode):
    settings = {"mode": mode, "max_staleness": K if mode == "async" else 0}
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"turns": 3},
        **{"async": settings},
        train={"steps": 5, "eval_episodes": 0, "checkpoint_every": 0},
        algo={"correction": "tis"},
    )
    cfg = cfg.model_copy(
        update={"tasks": [cfg.tasks[0].model_copy(update={"latency": cfg.tasks[0].latency.model_validate(LATENCY)})]}
    )
    assert run_training(cfg) == 0
    run = only_run(tmp_path)
    if mode == "async":
        assert_asynchronous(run, K)
    else:  # the negative case: the checks above can fail, and do on a synchronous run
        with pytest.raises(AssertionError):
            assert_asynchronous(run, K)
        assert overlap_s(run) <= 1e-3  # alternation (a millisecond of slack for the actors' clock offsets)
        assert all(r["token_staleness_max"] == 0 for r in metrics(run))
