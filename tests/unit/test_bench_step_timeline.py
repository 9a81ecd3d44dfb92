"""The critical path of a synchronous step from timeline spans, against hand-placed spans."""

from __future__ import annotations

import pytest

from rollarc.bench.step_timeline import critical_path, step_links


def span(role: str, kind: str, t0: float, t1: float, **fields) -> dict:
    return {"role": role, "kind": kind, "t0": t0, "t1": t1, **fields}


def one_step(base: float, step: int) -> list[dict]:
    """A swap ends at ``base``; the step's links are 0.01, 0.002, 0.05, 0.004, 0.006, 0.1, 0.005, 0.003 s."""
    return [
        span("rollout", "generate", base + 0.010, base + 0.040, step=step, traj=f"g{step}-0"),
        span("rollout", "generate", base + 0.012, base + 0.060, step=step, traj=f"g{step}-1"),
        span("env", "env_step", base + 0.062, base + 0.064, step_reward=1.0, traj=f"g{step}-1"),
        span("rollout", "generate", base + 0.020, base + 0.030, step=step, traj="eval-x-0"),  # not training
        span("train", "train", base + 0.070, base + 0.170, step=step),
        span("train", "sync", base + 0.171, base + 0.175, version=step + 1),
        span("rollout", "sync", base + 0.176, base + 0.178, version=step + 1),
    ]


def test_links_of_a_step_between_two_swaps():
    spans = [span("rollout", "sync", 0.9, 1.0, version=0), *one_step(1.0, 0), *one_step(1.178, 1)]
    links = step_links(spans)
    assert len(links) == 2
    assert links[0] == pytest.approx(
        {
            "admit_s": 0.010,
            "stagger_s": 0.002,
            "generate_s": 0.050,
            "return_s": 0.004,
            "to_train_s": 0.006,
            "train_s": 0.100,
            "publish_s": 0.005,
            "sync_s": 0.003,
            "step_s": 0.178,
        }
    )
    assert critical_path(spans)["step_s"] == pytest.approx(0.178)


def test_a_step_without_a_swap_before_it_is_left_out():
    assert step_links(one_step(1.0, 0)) == [] and critical_path(one_step(1.0, 0)) == {}
