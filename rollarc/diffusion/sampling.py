"""Sampling images from the policy: Flow-GRPO's SDE (training, with per-step log-probs) or the ODE (evaluation).

Every image is driven by its own seed, which fixes its initial noise and every step's noise
(``rollarc.algo.flow_sde.noise_sequence``), so the same (prompt, seed, steps) under the same weights gives
the same image, and under the next weights a comparable one: that is what makes a seed explored on stale
weights worth re-sampling with fresh ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rollarc.algo.flow_sde import noise_sequence, ode_step, sde_step, time_grid
from rollarc.diffusion.model import T2IPolicy


@dataclass
class Trajectories:
    """A batch of SDE samples: states ``[B, T+1, 3, H, W]`` (noise first), log-probs ``[B, T]``; on the CPU
    whatever device drew them (they travel through Ray to a trainer that may sit elsewhere)."""

    prompts: list[str]
    seeds: list[int]
    states: torch.Tensor
    logps: torch.Tensor
    version: int

    def images(self) -> np.ndarray:
        return to_images(self.states[:, -1])


def to_images(x: torch.Tensor) -> np.ndarray:
    """Model space ``[B, 3, H, W]`` in [-1, 1] to images ``[B, H, W, 3]`` in [0, 1]."""
    return ((x.clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).float().cpu().numpy()


def seeded_noise(seeds: list[int], shape: tuple[int, int, int], steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial noise ``[B, *shape]`` and step noise ``[T, B, *shape]``, each image's from its own seed."""
    pairs = [noise_sequence(seed, shape, steps) for seed in seeds]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs], dim=1)


@torch.no_grad()
def sample_sde(
    policy: T2IPolicy, prompts: list[str], seeds: list[int], steps: int, noise_level: float, version: int
) -> Trajectories:
    size, device = policy.image_size, policy.device
    x, noise = (n.to(device) for n in seeded_noise(seeds, (3, size, size), steps))  # drawn on the CPU: same on any
    grid = time_grid(steps).tolist()
    context = policy.encode(prompts)
    states, logps = [x], []
    for i in range(steps):
        t, t_next = grid[i], grid[i + 1]
        v = policy.velocity(x, torch.full((len(prompts),), t, device=device), context)
        x, logp = sde_step(x, v, t, t_next, noise[i], noise_level, grid[1])
        states.append(x)
        logps.append(logp)
    return Trajectories(list(prompts), list(seeds), torch.stack(states, 1).cpu(), torch.stack(logps, 1).cpu(), version)


@torch.no_grad()
def sample_ode(policy: T2IPolicy, prompts: list[str], seeds: list[int], steps: int) -> np.ndarray:
    """Deterministic Euler sampling from each seed's initial noise (evaluation); images in [0, 1]."""
    size, device = policy.image_size, policy.device
    x = seeded_noise(seeds, (3, size, size), 1)[0].to(device)  # the initial noise is the same for any step count
    grid = time_grid(steps).tolist()
    context = policy.encode(prompts)
    for i in range(steps):
        v = policy.velocity(x, torch.full((len(prompts),), grid[i], device=device), context)
        x = ode_step(x, v, grid[i], grid[i + 1])
    return to_images(x)
