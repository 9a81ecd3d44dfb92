"""Flow-GRPO's SDE sampler maths: the flow ODE as an SDE with a Gaussian log-probability per transition.

Rectified flow (SD3 convention): ``x_t = (1 - t) x_0 + t ε`` with ``t = 1`` pure noise and ``t = 0`` the
image; the model predicts the velocity ``v = ε − x_0``, and the ODE step is ``x_{t+Δt} = x_t + v Δt``
with ``Δt < 0``. Flow-GRPO (Liu et al., 2025) replaces it by the SDE that has the same marginals::

    σ_t   = a · sqrt(t / (1 − t))                              (a: the noise level)
    mean  = x_t + [v + σ_t² / (2t) · (x_t + (1 − t) v)] Δt
    x_{t+Δt} = mean + σ_t · sqrt(−Δt) · ε_step

so each denoising transition is a Gaussian with that mean and std ``σ_t · sqrt(−Δt)``, whose log-density
gives the policy log-probability PPO needs. At ``t = 1`` the std's ``1/(1 − t)`` is infinite; as in the
Flow-GRPO code, ``t = 1`` is replaced by the next grid point inside the square root. The std shrinks
towards ``t = 0``: on a linear grid of 8 steps it is ~10× smaller at the last step than at the first, so
the ratio of the last steps moves most and clipping concentrates there.

**A seed fixes the whole noise sequence** (:func:`noise_sequence`): the initial noise and every step's
ε. With only the initial noise fixed, the same seed under two policy versions gives unrelated images.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def time_grid(steps: int) -> Tensor:
    """``steps + 1`` times from 1 (noise) down to 0 (image), evenly spaced."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)


def noise_sequence(seed: int, shape: tuple[int, ...], steps: int) -> tuple[Tensor, Tensor]:
    """The initial noise ``[*shape]`` and the per-step noise ``[steps, *shape]`` that ``seed`` fixes."""
    gen = torch.Generator().manual_seed(int(seed))
    initial = torch.randn(shape, generator=gen)
    per_step = torch.randn((steps, *shape), generator=gen)
    return initial, per_step


def sde_std(t: float, t_next: float, noise_level: float, t_after_one: float) -> float:
    """The transition std ``σ_t · sqrt(−Δt)``; ``t_after_one`` replaces ``t = 1`` in ``sqrt(t / (1 − t))``."""
    if not 0.0 <= t_next < t <= 1.0:
        raise ValueError(f"need 0 <= t_next < t <= 1, got t={t}, t_next={t_next}")
    denom = 1.0 - (t_after_one if t >= 1.0 else t)
    sigma = noise_level * math.sqrt(t / denom)
    return sigma * math.sqrt(t - t_next)


def sde_mean(x: Tensor, velocity: Tensor, t: float, t_next: float, noise_level: float, t_after_one: float) -> Tensor:
    """The mean of ``x_{t+Δt}`` given ``x_t`` and the predicted velocity (see the module docstring)."""
    dt = t_next - t
    denom = 1.0 - (t_after_one if t >= 1.0 else t)
    sigma_sq = noise_level**2 * t / denom
    return x + (velocity + sigma_sq / (2.0 * t) * (x + (1.0 - t) * velocity)) * dt


def gaussian_log_prob(sample: Tensor, mean: Tensor, std: float) -> Tensor:
    """Per-sample log-density of an isotropic Gaussian, averaged over every dim but the first.

    The mean over pixels (not the sum) keeps the ratio ``exp(Δ log p)`` in a range PPO's clip can act
    on, as in Flow-GRPO; it is the log-density per pixel.
    """
    if std <= 0.0:
        raise ValueError(f"std must be positive, got {std}")
    per_dim = -((sample - mean) ** 2) / (2.0 * std**2) - math.log(std) - 0.5 * math.log(2.0 * math.pi)
    return per_dim.flatten(1).mean(dim=1)


def sde_step(
    x: Tensor, velocity: Tensor, t: float, t_next: float, noise: Tensor, noise_level: float, t_after_one: float
) -> tuple[Tensor, Tensor]:
    """One stochastic denoising step: ``(x_{t+Δt}, log p(x_{t+Δt} | x_t))`` with the given step noise."""
    mean = sde_mean(x, velocity, t, t_next, noise_level, t_after_one)
    std = sde_std(t, t_next, noise_level, t_after_one)
    nxt = mean + std * noise
    return nxt, gaussian_log_prob(nxt, mean, std)


def ode_step(x: Tensor, velocity: Tensor, t: float, t_next: float) -> Tensor:
    """The deterministic Euler step of the flow ODE (evaluation sampling)."""
    return x + velocity * (t_next - t)
