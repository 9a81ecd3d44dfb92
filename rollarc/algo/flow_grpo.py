"""Flow-GRPO's objective: a PPO-clipped ratio on per-denoising-step log-probabilities, with an optional KL.

Each image of a group is a trajectory of ``T`` Gaussian transitions (``rollarc.algo.flow_sde``); its
advantage is the group-relative advantage of its reward (:func:`floored_group_advantages`), shared
by all its steps. The loss of one step is PPO's ``−min(ρ A, clip(ρ, 1 ± ε) A)`` with
``ρ = exp(log p_θ − log p_behaviour)``.

**KL to the reference.** Two Gaussians with the same std ``s`` and means ``μ_θ``, ``μ_ref`` have
``KL = ‖μ_θ − μ_ref‖² / (2 s²)``; averaged per pixel, like the log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ClipStats:
    """Scalars of one loss evaluation, for the logs."""

    loss: float
    clip_fraction: float
    ratio_mean: float


def clipped_step_loss(logp: Tensor, logp_behaviour: Tensor, advantages: Tensor, clip: float) -> tuple[Tensor, Tensor]:
    """Per-sample PPO loss of one denoising step and whether it was clipped (both ``[batch]``)."""
    if clip <= 0.0:
        raise ValueError(f"clip must be positive, got {clip}")
    ratio = torch.exp(logp - logp_behaviour)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (unclipped > clipped).to(logp.dtype)
    return loss, was_clipped


def gaussian_mean_kl(mean: Tensor, ref_mean: Tensor, std: float) -> Tensor:
    """Per-sample KL between two same-std Gaussians, per pixel: ``mean((μ − μ_ref)²) / (2 s²)``."""
    if std <= 0.0:
        raise ValueError(f"std must be positive, got {std}")
    return ((mean - ref_mean) ** 2).flatten(1).mean(dim=1) / (2.0 * std**2)


def low_contrast_fraction(rewards: Tensor, tol: float) -> float:
    """Fraction of groups (rows of ``[groups, G]``) whose reward std is at most ``tol``.

    Measured on the rewards, not the normalised advantages: ``(r − mean) / std`` blows a tiny spread up to
    unit scale, so a group whose images all score alike carries (almost) no signal even when its
    normalised advantages look large.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [groups, group_size], got shape {tuple(rewards.shape)}")
    spread = rewards.to(torch.float64).std(dim=1, unbiased=False)
    return float((spread <= tol).to(torch.float64).mean().item())


def floored_group_advantages(rewards: Tensor, std_floor: float) -> Tensor:
    """``(r − mean) / max(std, std_floor)`` per group (rows of ``[groups, G]``; population std).

    Plain GRPO divides by the group's std, which blows a group whose images differ by rounding noise up
    to unit-scale advantages: with pixel rewards most groups of a weak policy are such groups, and their
    noise drove the policy down in a prototype. Flooring the std keeps a low-contrast group's advantages
    as small as its reward differences; groups with a real spread are normalised as usual.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [groups, group_size], got shape {tuple(rewards.shape)}")
    if std_floor <= 0.0:
        raise ValueError(f"std_floor must be positive, got {std_floor}")
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True).clamp_min(std_floor)
    return (rewards - mean) / std
