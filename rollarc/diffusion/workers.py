"""The t2i Ray roles: a sampler (on-policy groups, evaluation, and, on the spot pool, seed exploration) and a trainer.

Weights are versioned: the trainer's version is its optimiser step count; every batch of samples carries
the version of the weights that drew it. After each step the controller hands the trainer's new DiT
weights (an object-store reference) to the samplers with the new version; an explorer busy on the previous
version finishes its job first (a Ray actor runs one caller's calls in order), which is what makes its
exploration exactly one version stale.

With ``sp_degree > 1`` a sampler's DiT forwards run through an elastic Ulysses SP group of that many
member processes (:func:`sampling_policy`), one per device the role stands for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from rollarc.diffusion.config import RLConfig
from rollarc.diffusion.model import T2IPolicy, load_policy
from rollarc.diffusion.sampling import Trajectories, sample_ode, sample_sde
from rollarc.diffusion.sp_policy import SPPolicy
from rollarc.diffusion.tasks.base import Task
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.trainer import FlowGrpoTrainer, GroupBatch


def sampling_policy(policy_dir: str, sp_degree: int, threads: int) -> T2IPolicy:
    """The DiT from ``policy_dir``, its forwards through an SP group when ``sp_degree > 1``."""
    policy = load_policy(policy_dir).eval()
    return SPPolicy(policy, policy_dir, sp_degree, threads) if sp_degree > 1 else policy


def load_weights(policy: T2IPolicy, state: dict[str, torch.Tensor]) -> None:
    """A new DiT version into ``policy`` (and, for an SP policy, into every member of its group)."""
    if isinstance(policy, SPPolicy):
        policy.set_weights(state)
    else:
        policy.transformer.load_state_dict(state)


def sp_degree_of(policy: T2IPolicy) -> int:
    return policy.degree if isinstance(policy, SPPolicy) else 1


def reward_table(tasks: list[Task]) -> dict[str, Task]:
    """Each prompt's task (prompts of different tasks never coincide)."""
    return {prompt: task for task in tasks for prompt in task.prompts()}


def score(table: dict[str, Task], prompts: list[str], images: np.ndarray) -> list[float]:
    return [table[p].reward(p, image) for p, image in zip(prompts, images, strict=True)]


@ray.remote
class T2ISampler:
    def __init__(
        self, policy_dir: str, tasks: list[str], cache_dir: str, threads: int, version: int, sp_degree: int = 1
    ):
        torch.set_num_threads(threads)
        self.policy: T2IPolicy = sampling_policy(policy_dir, sp_degree, threads)
        self.table = reward_table([make_task(name, Path(cache_dir)) for name in tasks])
        self.version = version

    def set_weights(self, state: dict[str, torch.Tensor], version: int) -> int:
        load_weights(self.policy, state)
        self.version = version
        return version

    def sample(self, prompts: list[str], seeds: list[int], steps: int, noise_level: float) -> dict[str, Any]:
        traj = sample_sde(self.policy, prompts, seeds, steps, noise_level, self.version)
        return {
            "trajectories": traj,
            "rewards": score(self.table, prompts, traj.images()),
            "sp_degree": sp_degree_of(self.policy),
        }

    def explore(self, prompts: list[str], seeds: list[list[int]], steps: int, noise_level: float) -> dict[str, Any]:
        """Per-seed rewards of every candidate seed of every prompt (images are not kept)."""
        flat_prompts = [p for p, s in zip(prompts, seeds, strict=True) for _ in s]
        flat_seeds = [x for s in seeds for x in s]
        traj = sample_sde(self.policy, flat_prompts, flat_seeds, steps, noise_level, self.version)
        rewards = score(self.table, flat_prompts, traj.images())
        out, start = [], 0
        for s in seeds:
            out.append(rewards[start : start + len(s)])
            start += len(s)
        return {"rewards": out, "version": self.version, "images": len(flat_seeds)}

    def evaluate(self, prompts: list[str], seeds: list[int], steps: int) -> dict[str, Any]:
        images = sample_ode(self.policy, prompts, seeds, steps)
        return {"rewards": score(self.table, prompts, images), "images": images, "version": self.version}


@ray.remote
class T2ITrainer:
    def __init__(self, policy_dir: str, base_dir: str, cfg: RLConfig, threads: int, version: int):
        torch.set_num_threads(threads)
        reference = load_policy(base_dir) if cfg.kl_coef > 0 else None  # the KL's reference is the base, also on resume
        self.trainer = FlowGrpoTrainer(load_policy(policy_dir), cfg, reference)
        self.version = version

    def train(self, trajectories: Trajectories, rewards: list[list[float]]) -> dict[str, float]:
        if trajectories.version != self.version:
            raise ValueError(
                f"on-policy trainer at version {self.version} got samples of version {trajectories.version}"
            )
        stats = self.trainer.step(GroupBatch(trajectories, torch.tensor(rewards)))
        self.version += 1
        return stats

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.trainer.policy.transformer.state_dict().items()}

    def save(self, path: str) -> None:
        out = Path(path)
        self.trainer.policy.save(out / "policy")
        tmp = out / "trainer.pt.tmp"
        torch.save({"optimizer": self.trainer.opt.state_dict(), "version": self.version}, tmp)
        tmp.replace(out / "trainer.pt")

    def load_optimizer(self, path: str) -> int:
        state = torch.load(Path(path) / "trainer.pt", weights_only=False)
        self.trainer.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        return self.version
