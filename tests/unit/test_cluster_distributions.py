"""Closed-form means of clipped distributions, checked by hand and against many samples."""

import math

import numpy as np
import pytest

from rollarc.cluster.distributions import Constant, Empirical, Exponential, LogNormal, Uniform, sampler


def test_constant_and_uniform_means():
    assert Constant(value=5).mean() == 5
    assert Constant(value=5, max=3).mean() == 3
    assert Uniform(low=0, high=10).mean() == pytest.approx(5)
    # clip U(0,10) to [2, 6]: 2 on [0,2) -> 0.4, x on [2,6) -> 1.6, 6 on [6,10) -> 2.4
    assert Uniform(low=0, high=10, min=2, max=6).mean() == pytest.approx(4.4)


def test_exponential_clipped_mean():
    # E[min(X, c)] = m (1 - e^{-c/m}); m=2, c=2 -> 2 (1 - 1/e)
    assert Exponential(mean=2, max=2).mean() == pytest.approx(2 * (1 - math.exp(-1)))


def test_lognormal_mean_and_quantile():
    d = LogNormal(mean=100, sigma=1.0)
    assert d.mean() == pytest.approx(100)
    assert d.quantile(0.5) == pytest.approx(100 * math.exp(-0.5))  # median = e^mu
    clipped = LogNormal(mean=100, sigma=1.0, max=200, min=10)
    xs = clipped.draw(np.random.default_rng(0), 400_000)
    assert clipped.mean() == pytest.approx(xs.mean(), rel=5e-3)
    assert xs.max() <= 200 and xs.min() >= 10


def test_sampler_rounds_counts_and_never_returns_zero():
    next_value = sampler(Uniform(low=0, high=1), np.random.default_rng(1), integer=True)
    values = {next_value() for _ in range(10_000)}
    assert values == {1.0}
    draw = sampler(Empirical(values=[3, 7]), np.random.default_rng(2))
    assert {draw() for _ in range(100)} == {3.0, 7.0}


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError, match="below min"):
        LogNormal(mean=1, sigma=1, min=5, max=2)
