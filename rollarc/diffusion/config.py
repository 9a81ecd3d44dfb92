"""The text-to-image RL config (``kind: t2i``), separate from the LLM ``Config``.

``rollarc train FILE`` reads the YAML's top-level ``kind``: ``t2i`` validates it as :class:`T2IConfig`
and runs :func:`rollarc.runtime.t2i_entry.run_t2i`; anything else (or no ``kind``) is the LLM path,
unchanged. Every key is described in docs/diffusion.md and by ``rollarc config show`` on the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rollarc.config.cluster import CallDeadlines, PoolConfig, RoleConfig
from rollarc.config.io import FrozenModel, load_config, read_yaml
from rollarc.diffusion.tasks.base import TASK_SIZE
from rollarc.diffusion.tasks.registry import TASKS
from rollarc.models.device import DeviceName

CACHE = Path("artifacts") / "t2i"  # pretrained bases and the digit reader, shared by runs and benchmarks


class T2IModelConfig(FrozenModel):
    """The DiT and its prompt encoder (built tiny here, or loaded from a diffusers-format directory)."""

    path: str | None = Field(
        None, description="diffusers-format policy directory to start RL from; null: the pretrained base"
    )
    image_size: int = Field(
        16,
        ge=16,
        description="image side in pixels, a multiple of 16: the tasks render and score 16×16, so at 32 each "
        "task pixel is a 2×2 block (pretrained on scaled-up renderings, scored on block means)",
    )
    width: int = Field(64, ge=8, description="hidden size of the DiT and of the prompt encoder")
    layers: int = Field(4, ge=1, description="DiT transformer blocks")
    heads: int = Field(4, ge=1, description="attention heads (width must divide by it)")
    threads: int = Field(1, ge=1, description="torch threads of in-process work (pretraining, benchmark τ)")
    device: DeviceName = Field(
        "cpu",
        description="where the trainer, the sampler, the explorers and the SP members compute, as on the LLM path: "
        "auto = cuda in an actor that sees a GPU (roles on GPU-kind pools reserve one), else cpu; cuda fails at "
        "start-up without a GPU (docs/gpu.md#text-to-image)",
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> T2IModelConfig:
        if self.width % self.heads:
            raise ValueError(f"model.width {self.width} must be a multiple of model.heads {self.heads}")
        if self.image_size % TASK_SIZE:
            raise ValueError(
                f"model.image_size {self.image_size}: the tasks render {TASK_SIZE}×{TASK_SIZE} images; "
                f"use a multiple of {TASK_SIZE}"
            )
        return self


class PretrainConfig(FrozenModel):
    """Flow-matching pretraining on rendered ground truth, stopped early so RL has headroom."""

    checkpoint: str | None = Field(
        None, description="where the pretrained base is cached; null: artifacts/t2i/base-<hash of this section>"
    )
    steps: int = Field(400, ge=1, description="optimiser steps (few on purpose: the base stays imperfect)")
    batch_size: int = Field(64, ge=1, description="images per pretraining step")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate")
    seed: int = Field(0, description="seed of the initial weights and of the rendered batches")


class RLConfig(FrozenModel):
    """Flow-GRPO: groups of SDE samples per prompt, clipped per-step ratio, optional KL."""

    steps: int = Field(40, ge=1, description="optimiser steps (policy versions) to train")
    prompts_per_step: int = Field(8, ge=1, description="prompts (groups) per step")
    group_size: int = Field(8, ge=2, description="images per prompt (G)")
    sample_steps: int = Field(8, ge=1, description="denoising steps of training samples (SDE)")
    eval_steps: int = Field(16, ge=1, description="denoising steps of evaluation samples (ODE); more than training")
    noise_level: float = Field(0.7, gt=0, description="the SDE's noise level a (σ_t = a·sqrt(t/(1−t)))")
    lr: float = Field(3e-4, gt=0, description="AdamW learning rate of the DiT (the prompt encoder is frozen in RL)")
    clip: float = Field(
        0.001, gt=0, description="PPO clip range of the per-step ratio (per-pixel log-probs move little: keep it small)"
    )
    minibatches: int = Field(
        2, ge=1, description="optimiser sub-steps per step (groups split evenly; ratio ≠ 1 after the first)"
    )
    kl_coef: float = Field(0.0, ge=0, description="weight of the KL to the pretrained reference (0: no reference kept)")
    adv_std_floor: float = Field(
        0.05, gt=0, description="advantages are (r − mean) / max(group std, this): low-contrast groups stay small"
    )
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    low_contrast_tol: float = Field(
        0.05, ge=0, description="a group whose reward std is at most this counts as near-zero-advantage"
    )
    eval_every: int = Field(
        5, ge=1, description="held-out evaluation every N steps (and before the first, after the last)"
    )
    eval_prompts: int = Field(24, ge=1, description="held-out prompts per evaluation")
    eval_seeds: int = Field(2, ge=1, description="seeds per held-out prompt (fixed across evaluations)")


class ExploreConfig(FrozenModel):
    """Spotlight: stale-weight seed exploration on the spot pool, and the planner of its budget."""

    enabled: bool = Field(False, description="explore candidate seeds on weights one version behind the trainer")
    candidates: int = Field(
        24, ge=2, description="candidate seeds per prompt explored (a planner splits the same total differently)"
    )
    planner: Literal["uniform", "contrast"] = Field(
        "uniform",
        description="how the step's candidate budget is split over its prompts: uniform (candidates each) or contrast "
        "(by each arm's observed reward std; some get none)",
    )
    arms: Literal["template", "prompt"] = Field(
        "template", description="a planner's arms: prompt templates (recur every few steps) or prompts"
    )
    contrast_decay: float = Field(
        0.5, ge=0, lt=1, description="contrast planner: weight its moving average keeps on older observations"
    )
    chunk: int = Field(4, ge=1, description="a planner hands out candidates in chunks of this many seeds")

    @model_validator(mode="after")
    def _planner_needs_exploration(self) -> ExploreConfig:
        if self.planner != "uniform" and not self.enabled:
            raise ValueError(f"explore.planner {self.planner} needs explore.enabled: true")
        return self


class T2IPoolConfig(PoolConfig):
    """A resource pool; ``spot`` marks preemptible capacity (priced at the catalogue's spot factor)."""

    spot: bool = Field(False, description="preemptible capacity: explorers must run here, and cost uses spot prices")


class SpotConfig(FrozenModel):
    """Explorers as pull workers on preemptible Ray nodes, and the injector that preempts them (docs/spot.md)."""

    enabled: bool = Field(
        False,
        description="run the explorer as one pull worker per unit of its spot pool, each on its own Ray node "
        "of a local ray.cluster_utils.Cluster, preempted by the injector below; on a cluster the run joins "
        "(cluster.address), on the nodes that carry the spot pool's resource, with no injector (docs/spot.md)",
    )
    trace: str | None = Field(
        None,
        description="preemption trace (YAML list of {at_s, slot, notice_s}, at_s counted from the first exploration "
        "jobs); null: draw at rate_per_hour",
    )
    rate_per_hour: float = Field(
        60.0, ge=0, description="preemptions per spot node per hour when no trace is given (0: none)"
    )
    notice_s: float = Field(2.0, ge=0, description="notice before a rate-drawn preemption removes a node (0: none)")
    replacement_s: float = Field(3.0, ge=0, description="delay before a replacement node joins the lost node's slot")
    lease_s: float = Field(
        10.0, gt=0, description="a job's lease; a worker that misses heartbeats this long loses it (no-notice loss)"
    )
    heartbeat_every: int = Field(
        1,
        ge=1,
        description="denoising steps between a worker's heartbeats (each a round trip to the queue actor); a notice "
        "reaches the worker up to this many steps late, so keep these steps well inside notice_s and lease_s",
    )
    horizon_s: float = Field(3600.0, gt=0, description="the rate-drawn schedule covers this much of the run")
    target: Literal["slot", "busy"] = Field(
        "slot",
        description="which node a preemption hits: slot (the trace's or the drawn slot, busy or not) or busy (the "
        "node whose worker is furthest into a leased job, waiting up to busy_wait_s for one; else the slot)",
    )
    busy_wait_s: float = Field(
        30.0, ge=0, description="with target busy: how long a preemption waits for a worker to be mid-job"
    )
    drain_poll_s: float = Field(
        0.1,
        gt=0,
        description="seconds between polls of Ray's draining nodes (a drain of a spot worker's node, reason "
        "preemption, is its notice); keep it well inside notice_s, the drain's deadline",
    )

    node_poll_s: float = Field(
        2.0,
        gt=0,
        description="on a cluster the run joined: seconds between reads of its nodes, placing explorer slots whose "
        "node went away on spot nodes with a spare unit (one that joined since, or whose worker went)",
    )

    @model_validator(mode="after")
    def _notice_polled_in_time(self) -> SpotConfig:
        if 0 < self.notice_s <= self.drain_poll_s:
            raise ValueError(
                f"spot.drain_poll_s {self.drain_poll_s:g} is not below spot.notice_s {self.notice_s:g}: a notice comes "
                "from polling Ray's drains and would reach the worker after its node is gone; lower drain_poll_s"
            )
        return self


class T2IRolesConfig(FrozenModel):
    """The three t2i roles (one replica each)."""

    trainer: RoleConfig = Field(RoleConfig(pool="compute"), description="the Flow-GRPO trainer")
    sampler: RoleConfig = Field(RoleConfig(pool="compute"), description="on-policy sampler of the trainer's groups")
    explorer: RoleConfig = Field(
        RoleConfig(pool="spot"), description="seed explorer on stale weights (used when explore.enabled)"
    )

    @model_validator(mode="after")
    def _one_replica_each(self) -> T2IRolesConfig:
        for name in ("trainer", "sampler", "explorer"):
            replicas = getattr(self, name).replicas
            if replicas != 1:
                raise ValueError(f"cluster.roles.{name}.replicas is {replicas}: the t2i path runs one replica per role")
        return self


class T2IClusterConfig(CallDeadlines):
    """The Ray cluster (local, or joined at ``address``), its pools and where each role runs."""

    address: str | None = Field(
        None,
        description="join this Ray cluster instead of starting a local one (`rollarc train --address` overrides "
        "it): its nodes must carry the pools' resources; spot nodes are those with the spot pool's (docs/spot.md)",
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local Ray cluster (null: every core)")
    sp_degree: int = Field(
        1,
        ge=1,
        description="Ulysses sequence-parallel degree of the sampler's and each explorer's DiT forwards (that many "
        "member processes each, one per device; must divide model.heads and the 64 image tokens; 1: no SP). With "
        "spot.enabled a preemption notice takes one member and the survivors regroup (docs/spot.md)",
    )
    pools: dict[str, T2IPoolConfig] = Field(
        {"compute": T2IPoolConfig(count=2), "spot": T2IPoolConfig(count=1, spot=True)},
        description="resource pools by name",
    )
    roles: T2IRolesConfig = Field(T2IRolesConfig(), description="the pool of each role")

    @model_validator(mode="after")
    def _roles_on_declared_pools(self) -> T2IClusterConfig:
        for name in ("trainer", "sampler", "explorer"):
            pool = getattr(self.roles, name).pool
            if pool not in self.pools:
                raise ValueError(f"cluster.roles.{name}.pool {pool!r} is not a declared pool ({', '.join(self.pools)})")
        return self


class RunT2IConfig(FrozenModel):
    dir: str = Field("runs", description="parent directory of run directories")
    tensorboard: bool = Field(True, description="also write TensorBoard events")
    checkpoint_every: int = Field(10, ge=1, description="checkpoint every N steps (and at the end)")
    keep_last_checkpoints: int = Field(
        2,
        ge=0,
        description="keep only the last N complete checkpoints, deleting older ones once a new one is written (at "
        "least 2 by default: a damaged latest one still has a previous one to resume from; 0: keep every checkpoint)",
    )
    progress: bool = Field(True, description="print one line per step")


class T2IConfig(FrozenModel):
    """A text-to-image Flow-GRPO run (docs/diffusion.md)."""

    kind: Literal["t2i"] = Field(..., description="selects this config (rollarc train dispatches on it)")
    name: str = Field("t2i", description="run name (prefix of the run directory)")
    seed: int = Field(0, description="seed of the prompt schedule and of the baseline's random noise seeds")
    resume: str | None = Field(None, description="run directory to resume from its latest checkpoint")
    tasks: list[str] = Field(["compositional"], min_length=1, description=f"task plugins ({', '.join(TASKS)})")
    model: T2IModelConfig = Field(T2IModelConfig(), description="the policy")
    pretrain: PretrainConfig = Field(PretrainConfig(), description="the flow-matching base")
    train: RLConfig = Field(RLConfig(), description="Flow-GRPO")
    explore: ExploreConfig = Field(ExploreConfig(), description="Spotlight seed exploration")
    cluster: T2IClusterConfig = Field(T2IClusterConfig(), description="pools and roles")
    spot: SpotConfig = Field(SpotConfig(), description="preemptible explorers and the preemption injector")
    run: RunT2IConfig = Field(RunT2IConfig(), description="outputs")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[str]) -> list[str]:
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"unknown tasks {unknown} (known: {', '.join(TASKS)})")
        return tasks

    @model_validator(mode="after")
    def _explorer_on_spot(self) -> T2IConfig:
        pool = self.cluster.roles.explorer.pool
        if self.explore.enabled and not self.cluster.pools[pool].spot:
            raise ValueError(
                f"explore.enabled: the explorer's pool {pool!r} must be marked spot: true (cluster.pools.{pool}.spot)"
            )
        if self.explore.enabled and self.explore.candidates < self.train.group_size:
            raise ValueError(
                f"explore.candidates {self.explore.candidates} must be at least train.group_size {self.train.group_size}"
            )
        if self.spot.enabled and not self.explore.enabled:
            raise ValueError("spot.enabled needs explore.enabled: true (the explorers are the spot workers)")
        sp, tokens = self.cluster.sp_degree, (self.model.image_size // 2) ** 2  # patch size 2
        if self.model.heads % sp or tokens % sp:
            raise ValueError(
                f"cluster.sp_degree {sp} must divide model.heads {self.model.heads} and the {tokens} image tokens"
            )
        if self.explore.planner != "uniform" and self.explore.candidates < self.train.group_size + self.explore.chunk:
            raise ValueError(
                f"explore.candidates {self.explore.candidates} must be at least train.group_size + explore.chunk "
                f"({self.train.group_size + self.explore.chunk}) for the {self.explore.planner} planner to explore anything"
            )
        return self

    def pretrained_dir(self) -> Path:
        if self.pretrain.checkpoint is not None:
            return Path(self.pretrain.checkpoint)
        key = (
            self.pretrain.model_dump_json()
            + self.model.model_dump_json(exclude={"path", "threads", "device"})
            + str(self.tasks)
        )
        return CACHE / f"base-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def is_t2i(path: str) -> bool:
    """Whether the YAML file at ``path`` declares ``kind: t2i``."""
    return read_yaml(path).get("kind") == "t2i"


def load_t2i_config(path: str | None, overrides: list[str] | None = None) -> T2IConfig:
    return load_config(T2IConfig, path, overrides)
