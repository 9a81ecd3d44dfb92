"""``rollarc bench ditstep``: it times the sampler's own denoising step, and its derived figures are exact."""

from __future__ import annotations

import pytest
import torch

from rollarc.bench.ditstep import floor_width, median_ms, step_fn, summarise
from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sampling import sample_sde


def test_the_timed_step_is_the_first_step_sample_sde_takes():
    policy = build_policy(["one", "red", "square", "left"], 16, 16, 1, 2, seed=0).eval()
    x_next, logp = step_fn(policy, "one red square left", 3, 0.7)()
    traj = sample_sde(policy, ["one red square left"] * 3, [0, 1, 2], 2, 0.7, version=0)
    assert torch.equal(x_next, traj.states[:, 1]) and torch.equal(logp, traj.logps[:, 0])


def test_summary_adds_the_overhead_and_the_ratio():
    times = {"step_ms_batch1": 90.0, "step_ms_per_image": 40.0, "dispatch_floor_ms": 12.0, "ray_call_ms": 3.0}
    out = summarise(times)
    assert out["overhead_ms"] == 15.0 and out["step_over_overhead"] == 6.0
    assert {k: out[k] for k in times} == times


def test_median_ms_runs_warmup_then_reps_and_the_floor_keeps_the_heads():
    calls = []
    assert median_ms(lambda: calls.append(1), reps=5, warmup=2) >= 0.0
    assert len(calls) == 7
    assert floor_width(4) == 8 and floor_width(4) % 4 == 0
    with pytest.raises(ZeroDivisionError):
        summarise({"step_ms_batch1": 1.0, "dispatch_floor_ms": 0.0, "ray_call_ms": 0.0})
