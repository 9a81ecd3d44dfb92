"""The t2i Ray roles: a sampler (on-policy groups, evaluation, and, on the spot pool, seed exploration) and a trainer.

Weights are versioned: the trainer's version is its optimiser step count; every batch of samples carries
the version of the weights that drew it. After each step the trainer publishes its new DiT weights through
``rollarc.sync`` (:mod:`rollarc.diffusion.weight_sync`) and the controller hands the update (a delta from
the previous version, one object-store reference) to the samplers; each applies it to its own copy, or
fetches a catch-up or full copy from the trainer when it does not fit, and reports the bytes. An explorer
busy on the previous version finishes its job first (a Ray actor runs one caller's calls in order), which
is what makes its exploration exactly one version stale.

With ``sp_degree > 1`` a sampler's DiT forwards run through an elastic Ulysses SP group of that many
member actors (:func:`sampling_policy`), one per device the role stands for (on the sampler's node).

Each role computes on ``model.device``, resolved inside its actor (``device``); ``member_gpus`` is what each
of its SP members reserves (the role's own share: :mod:`rollarc.diffusion.t2i_device`). Tensors cross Ray on
the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from rollarc.config.cluster import CallDeadlines
from rollarc.diffusion.config import RLConfig
from rollarc.diffusion.model import T2IPolicy, load_policy
from rollarc.diffusion.sampling import Trajectories, sample_ode, sample_sde
from rollarc.diffusion.sp_group import on_named_nodes
from rollarc.diffusion.sp_policy import SPPolicy
from rollarc.diffusion.tasks.base import Task, to_task_size
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.trainer import FlowGrpoTrainer, GroupBatch
from rollarc.diffusion.weight_sync import DiTReceiver, Received, dit_publisher
from rollarc.models.checkpoint import load_state_file, save_state_file
from rollarc.models.device import resolve_device
from rollarc.rayproc.deadline import Deadlines
from rollarc.sync.versions import WHOLE, VersionedUpdate


def sampling_policy(
    policy_dir: str,
    sp_degree: int,
    threads: int,
    device: str = "cpu",
    member_gpus: float = 0.0,
    member_resource: str | None = None,
) -> T2IPolicy:
    """The DiT from ``policy_dir`` on ``device`` (a ``model.device`` name), its forwards through an SP group of
    members each reserving ``member_gpus`` when ``sp_degree > 1``: the member started n-th on the node that
    carries the resource ``member_resource`` + n (a spot fleet's member nodes), or with None on this node."""
    policy = load_policy(policy_dir).to(resolve_device(device)).eval()
    if sp_degree == 1:
        return policy
    place = None if member_resource is None else on_named_nodes(member_resource)
    return SPPolicy(policy, policy_dir, sp_degree, threads, device=device, member_gpus=member_gpus, place=place)


def load_weights(policy: T2IPolicy, state: dict[str, torch.Tensor]) -> None:
    """A new DiT version into ``policy`` (and, for an SP policy, into every member of its group)."""
    if isinstance(policy, SPPolicy):
        policy.set_weights(state)
    else:
        policy.transformer.load_state_dict(state)


def on_cpu(tree: Any) -> Any:
    """The tensors of nested dicts and lists moved to the CPU (an optimiser state saved on a GPU loads anywhere)."""
    if isinstance(tree, torch.Tensor):
        return tree.cpu()
    if isinstance(tree, dict):
        return {k: on_cpu(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [on_cpu(v) for v in tree]
    return tree


def received_record(got: Received) -> dict[str, int]:
    return {"version": got.version, "sync_bytes": got.nbytes, "sync_full_copies": int(got.full)}


def sp_degree_of(policy: T2IPolicy) -> int:
    return policy.degree if isinstance(policy, SPPolicy) else 1


def reward_table(tasks: list[Task]) -> dict[str, Task]:
    """Each prompt's task (prompts of different tasks never coincide)."""
    return {prompt: task for task in tasks for prompt in task.prompts()}


def score(table: dict[str, Task], prompts: list[str], images: np.ndarray) -> list[float]:
    """Each image's reward from its prompt's task, read at the tasks' 16×16 (:func:`to_task_size`)."""
    small = to_task_size(images)
    return [table[p].reward(p, image) for p, image in zip(prompts, small, strict=True)]


@ray.remote
class T2ISampler:
    def __init__(
        self,
        policy_dir: str,
        tasks: list[str],
        cache_dir: str,
        threads: int,
        version: int,
        sp_degree: int = 1,
        device: str = "cpu",
        member_gpus: float = 0.0,
    ):
        torch.set_num_threads(threads)
        self.policy: T2IPolicy = sampling_policy(policy_dir, sp_degree, threads, device, member_gpus)
        self.table = reward_table([make_task(name, Path(cache_dir)) for name in tasks])
        self.version = version
        self.receiver = DiTReceiver(self.policy.transformer.state_dict(), version)
        self.unreported = (0, 0)  # (bytes, full copies) received since an exploration last reported them

    def sync_weights(
        self, updates: tuple[VersionedUpdate, ...], trainer: Any, deadlines: Deadlines | None = None
    ) -> dict[str, int]:
        """Apply the trainer's published update (fetching a catch-up or full copy from it if it does not fit)."""
        wait = deadlines or Deadlines.of(CallDeadlines())  # the controller passes the run's
        got = self.receiver.sync(
            updates, lambda have: wait.get("train", trainer.fetch.remote(have), "the trainer", "fetch")
        )
        load_weights(self.policy, self.receiver.state)
        self.version = got.version
        self.unreported = (self.unreported[0] + got.nbytes, self.unreported[1] + int(got.full))
        return received_record(got)

    def ping(self) -> int:
        """A no-op call (its version): what one Ray round trip to the sampler costs (``rollarc bench ditstep``)."""
        return self.version

    def weights(self) -> dict[str, torch.Tensor]:
        """The DiT weights the sampler draws with (for checks), on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.policy.transformer.state_dict().items()}

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
        nbytes, full = self.unreported
        self.unreported = (0, 0)
        return {
            "rewards": out,
            "version": self.version,
            "images": len(flat_seeds),
            "sync_bytes": nbytes,
            "sync_full_copies": full,
        }

    def evaluate(self, prompts: list[str], seeds: list[int], steps: int) -> dict[str, Any]:
        images = sample_ode(self.policy, prompts, seeds, steps)
        return {"rewards": score(self.table, prompts, images), "images": images, "version": self.version}


@ray.remote
class T2ITrainer:
    def __init__(self, policy_dir: str, base_dir: str, cfg: RLConfig, threads: int, version: int, device: str = "cpu"):
        torch.set_num_threads(threads)
        on = resolve_device(device)
        # the KL's reference is the base, also on resume
        reference = load_policy(base_dir).to(on) if cfg.kl_coef > 0 else None
        self.trainer = FlowGrpoTrainer(load_policy(policy_dir).to(on), cfg, reference)
        self.version = version
        self.publisher = dit_publisher(self.trainer.policy.transformer.state_dict(), version)

    def ping(self) -> int:
        """Answers while alive (the controller tells a lost trainer from another failure by it)."""
        return self.version

    def train(self, trajectories: Trajectories, rewards: list[list[float]]) -> dict[str, float]:
        if trajectories.version != self.version:
            raise ValueError(
                f"on-policy trainer at version {self.version} got samples of version {trajectories.version}"
            )
        stats = self.trainer.step(GroupBatch(trajectories, torch.tensor(rewards)))
        self.version += 1
        return stats

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.trainer.policy.transformer.state_dict().items()}

    def publish(self) -> tuple[VersionedUpdate, ...]:
        """Publish the current weights as ``self.version``; returns the update a receiver one version behind
        needs (the delta, or a full copy if no delta could be made)."""
        if self.publisher.version != self.version:
            self.publisher.publish(self.trainer.policy.transformer.state_dict(), self.version)
        return self.publisher.latest(WHOLE)

    def fetch(self, have: int | None) -> tuple[VersionedUpdate, ...]:
        """What a receiver at ``have`` (None: holding nothing usable) needs: a delta chain or a full copy."""
        return self.publisher.fetch(WHOLE, have)

    def full(self) -> tuple[VersionedUpdate, ...]:
        """A full copy of the published version (what a spot replacement that just joined takes)."""
        return (self.publisher.full(WHOLE),)

    def save(self, path: str) -> None:
        out = Path(path)
        self.trainer.policy.save(out / "policy")
        tmp = out / "trainer.pt.tmp"
        save_state_file({"optimizer": on_cpu(self.trainer.opt.state_dict()), "version": self.version}, tmp)
        tmp.replace(out / "trainer.pt")

    def load_optimizer(self, path: str) -> int:
        state = load_state_file(Path(path) / "trainer.pt")
        self.trainer.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        return self.version
