"""Flow-GRPO maths against hand-computed values, and the health of the first and last denoising steps."""

import itertools
import math

import pytest
import torch

from rollarc.algo.flow_grpo import (
    clipped_step_loss,
    floored_group_advantages,
    gaussian_mean_kl,
    low_contrast_fraction,
)
from rollarc.algo.flow_sde import (
    gaussian_log_prob,
    noise_sequence,
    ode_step,
    sde_mean,
    sde_std,
    sde_step,
    time_grid,
)


def test_gaussian_log_prob_by_hand():
    # x=1, mean=0, std=2: -1/8 - ln 2 - ln sqrt(2π)
    got = gaussian_log_prob(torch.ones(1, 3), torch.zeros(1, 3), 2.0)
    assert got.item() == pytest.approx(-0.125 - math.log(2.0) - 0.5 * math.log(2 * math.pi), abs=1e-6)


def test_sde_mean_and_std_by_hand():
    # a=0.5, t=0.5, t_next=0.25: σ² = 0.25·0.5/0.5 = 0.25; mean = 1 + (2 + 0.25/1·(1 + 0.5·2))·(−0.25) = 0.375
    x, v = torch.ones(1, 1), torch.full((1, 1), 2.0)
    assert sde_mean(x, v, 0.5, 0.25, 0.5, 0.9).item() == pytest.approx(0.375)
    assert sde_std(0.5, 0.25, 0.5, 0.9) == pytest.approx(0.5 * 0.5)  # σ_t·sqrt(−Δt)
    # at t=1 the 1/(1−t) uses the next grid point: σ = 0.5·sqrt(1/(1−0.75)) = 1, std = 1·sqrt(0.25)
    assert sde_std(1.0, 0.75, 0.5, 0.75) == pytest.approx(0.5)


def test_zero_noise_level_mean_is_the_ode_step():
    x, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(sde_mean(x, v, 0.6, 0.4, 0.0, 0.9), ode_step(x, v, 0.6, 0.4))


def test_step_log_prob_is_the_density_of_the_drawn_noise():
    x, v, eps = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    nxt, logp = sde_step(x, v, 0.5, 0.375, eps, 0.7, 0.875)
    std = sde_std(0.5, 0.375, 0.7, 0.875)
    expected = (-(eps**2) / 2 - math.log(std) - 0.5 * math.log(2 * math.pi)).flatten(1).mean(1)
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(nxt, sde_mean(x, v, 0.5, 0.375, 0.7, 0.875) + std * eps)


def test_first_and_last_steps_are_finite_and_the_last_std_is_much_smaller():
    grid = time_grid(8).tolist()
    stds = [sde_std(t, tn, 0.7, grid[1]) for t, tn in itertools.pairwise(grid)]
    assert all(math.isfinite(s) and s > 0 for s in stds)
    assert stds[0] / stds[-1] == pytest.approx(1.0 / (math.sqrt(0.125 / 0.875) * math.sqrt(0.125)), rel=1e-6)
    x, v = torch.randn(4, 3, 8, 8) * 3, torch.randn(4, 3, 8, 8) * 3
    for t, tn in [(grid[0], grid[1]), (grid[-2], grid[-1])]:
        nxt, logp = sde_step(x, v, t, tn, torch.randn_like(x), 0.7, grid[1])
        assert torch.isfinite(nxt).all() and torch.isfinite(logp).all()


def test_a_seed_fixes_the_whole_noise_sequence():
    a0, a = noise_sequence(7, (3, 4, 4), 5)
    b0, b = noise_sequence(7, (3, 4, 4), 5)
    assert torch.equal(a0, b0) and torch.equal(a, b)
    c0, c = noise_sequence(8, (3, 4, 4), 5)
    assert not torch.equal(a0, c0) and not torch.equal(a, c)
    assert a.shape == (5, 3, 4, 4)


def test_clipped_step_loss_by_hand():
    logp = torch.tensor([math.log(1.5), math.log(1.5)])
    loss, clipped = clipped_step_loss(logp, torch.zeros(2), torch.tensor([1.0, -1.0]), 0.2)
    torch.testing.assert_close(loss, torch.tensor([-1.2, 1.5]))
    torch.testing.assert_close(clipped, torch.tensor([1.0, 0.0]))


def test_gaussian_mean_kl_by_hand():
    kl = gaussian_mean_kl(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2), 1.0)
    assert kl.item() == pytest.approx((1 + 4) / 2 / 2)


def test_low_contrast_fraction():
    rewards = torch.tensor([[0.5, 0.5, 0.5], [0.0, 1.0, 0.0], [0.2, 0.21, 0.2]])
    assert low_contrast_fraction(rewards, 0.01) == pytest.approx(2 / 3)


def test_floored_group_advantages_by_hand():
    # group 1: mean .5, population std .5 -> ±1; group 2: spread .01 (std .005) floored at .05 -> ±0.1
    adv = floored_group_advantages(torch.tensor([[0.0, 1.0], [0.20, 0.21]]), 0.05)
    torch.testing.assert_close(adv, torch.tensor([[-1.0, 1.0], [-0.1, 0.1]]), atol=1e-5, rtol=0)
