"""The ``reward:`` section of the training config.

``kind`` says where the trajectory reward comes from:

* ``rule``: the environment's own reward, a pure function computed in-process (the default);
* ``serverless``: a model-based reward served by an autoscaled Ray Serve deployment (``min_replicas``
  may be 0: scale to zero; ``min_replicas`` is the warm floor);
* ``dedicated``: the same model on a fixed pool of ``cluster.roles.reward.replicas`` replicas (the
  baseline).

A model-based score is added to the environment return: ``reward = env_return + weight * score``.
``stateless`` is the config's statement about the reward component: only a stateless component may
run serverless, because its replicas come and go between requests. Environments are always stateful
and stay pinned on EnvWorkers; there is nothing to configure for them here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rollarc.config.cluster import ClusterConfig
from rollarc.config.io import FrozenModel

RewardKind = Literal["rule", "serverless", "dedicated"]
MODEL_KINDS = ("serverless", "dedicated")


class AutoscalingConfig(FrozenModel):
    """Ray Serve autoscaling of the ``serverless`` reward (see Ray Serve's ``AutoscalingConfig``)."""

    min_replicas: int = Field(0, ge=0, description="the warm floor: replicas kept even when idle (0: scale to zero)")
    initial_replicas: int | None = Field(
        None, ge=0, description="replicas started warm at launch (default: min_replicas)"
    )
    max_replicas: int = Field(4, ge=1, description="the ceiling Serve scales up to; must fit in the reward pool")
    target_ongoing_requests: float = Field(4.0, gt=0.0, description="in-flight requests per replica Serve aims for")
    upscale_delay_s: float = Field(
        0.5, ge=0.0, description="how long the load must call for more replicas before Serve adds them"
    )
    downscale_delay_s: float = Field(
        5.0, ge=0.0, description="how long the load must call for fewer replicas before Serve removes them"
    )
    downscale_to_zero_delay_s: float | None = Field(None, ge=0.0, description="default: downscale_delay_s")
    metrics_interval_s: float = Field(0.25, gt=0.0, description="how often replicas and callers report load")
    look_back_period_s: float = Field(1.0, gt=0.0, description="window the load is averaged over")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})")
        initial = self.initial_replicas
        if initial is not None and not self.min_replicas <= initial <= self.max_replicas:
            raise ValueError(
                f"initial_replicas ({initial}) must lie in [min_replicas, max_replicas] = "
                f"[{self.min_replicas}, {self.max_replicas}]"
            )
        return self

    def serve_options(self) -> dict[str, Any]:
        """The ``autoscaling_config`` dict Ray Serve takes."""
        return self.model_dump(exclude_none=True)


class BatchingConfig(FrozenModel):
    """``@serve.batch`` settings of every reward replica."""

    max_batch_size: int = Field(16, ge=1, description="trajectories scored together in one forward pass at most")
    batch_wait_timeout_s: float = Field(0.01, ge=0.0, description="how long a partial batch waits for more requests")
    max_ongoing_requests: int | None = Field(None, ge=1, description="per replica (default: 2 x max_batch_size)")

    @property
    def ongoing_limit(self) -> int:
        return self.max_ongoing_requests or 2 * self.max_batch_size


class ServiceCostConfig(FrozenModel):
    """Extra time each scored batch takes, on top of the model's own forward pass (default: none).

    A way to stand in for a larger reward model on a GPU: a batch of ``n`` trajectories also waits
    ``fixed_s + per_item_s * n`` seconds, without using a CPU (an ``asyncio.sleep``). Used by
    ``rollarc bench reward``; always visible in the config, never applied silently.
    """

    fixed_s: float = Field(0.0, ge=0.0, description="seconds added to every scored batch")
    per_item_s: float = Field(0.0, ge=0.0, description="seconds added per trajectory of a scored batch")

    def seconds(self, batch_size: int) -> float:
        return self.fixed_s + self.per_item_s * batch_size


class JudgeArchConfig(FrozenModel):
    """The progress judge: a small transformer encoder over the trajectory's last tokens."""

    context_tokens: int = Field(96, ge=8, le=4096, description="the trajectory's last tokens the judge reads")
    d_model: int = Field(64, ge=8, description="width of the encoder (divisible by heads)")
    heads: int = Field(4, ge=1, description="attention heads per layer")
    layers: int = Field(2, ge=1, description="encoder layers")

    @model_validator(mode="after")
    def _heads_divide(self) -> JudgeArchConfig:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        return self


class RewardTrainConfig(FrozenModel):
    """``rollarc reward train``: the data rollarc generates and how the judge is trained on it."""

    episodes: int = Field(3000, ge=10, description="labelled episodes, from a noisy expert over the config's tasks")
    epsilons: list[float] = Field(
        [0.0, 0.1, 0.25, 0.5, 1.0],
        min_length=1,
        description="per-turn chance of a random action; episodes cycle through them",
    )
    random_actions: list[str] = Field(["U", "D", "L", "R"], min_length=1, description="what a random action is")
    cut_fraction: float = Field(0.3, ge=0.0, le=1.0, description="share of episodes cut short at a random turn")
    heldout_fraction: float = Field(
        0.2, gt=0.0, lt=1.0, description="share of the episodes kept out of training to score the judge"
    )
    seed_base: int = Field(30_000_000, ge=0, description="env seeds of the reward data (disjoint from RL seeds)")
    label_horizon: int = Field(400, ge=1, description="expert steps at most when measuring distance to the goal")
    steps: int = Field(600, ge=1, description="optimiser steps of the judge")
    batch_size: int = Field(64, ge=1, description="examples per judge training step")
    lr: float = Field(2e-3, gt=0.0, description="learning rate of the judge")
    seed: int = Field(0, description="seeds the judge's initial weights and its batches")
    judge: JudgeArchConfig = Field(JudgeArchConfig(), description="the judge's architecture")


class RewardConfig(FrozenModel):
    """Where the trajectory reward comes from (see the module docstring)."""

    kind: RewardKind = Field(
        "rule",
        description="`rule`: the env's own reward, in-process; `serverless`: a judge "
        "served by an autoscaled Ray Serve deployment; `dedicated`: the "
        "same judge on cluster.roles.reward.replicas fixed replicas",
    )
    stateless: bool = Field(True, description="the reward keeps no per-trajectory state (required for serverless)")
    model_path: str = Field("artifacts/reward/{name}", description="the judge directory; {name} is the run name")
    weight: float = Field(1.0, description="reward = env_return + weight * score")
    timeout_s: float = Field(30.0, gt=0.0, description="budget per trajectory, retries included; then it fails")
    max_retries: int = Field(2, ge=0, description="retries after a replica died mid-request")
    retry_backoff_s: float = Field(0.2, ge=0.0, description="seconds to wait before a retry")
    app_name: str = Field(
        "rollarc-reward", pattern=r"^[A-Za-z0-9_.-]+$", description="name of the Ray Serve application"
    )
    autoscaling: AutoscalingConfig = Field(AutoscalingConfig(), description="scaling of the serverless reward")
    batching: BatchingConfig = Field(BatchingConfig(), description="request batching of every reward replica")
    service_cost: ServiceCostConfig = Field(
        ServiceCostConfig(), description="extra seconds per scored batch, to stand in for a larger model"
    )
    train: RewardTrainConfig = Field(
        RewardTrainConfig(), description="`rollarc reward train`: the judge's data and training"
    )

    @model_validator(mode="after")
    def _kind_rules(self) -> RewardConfig:
        if self.kind == "serverless" and not self.stateless:
            raise ValueError(
                "reward.kind 'serverless' needs reward.stateless: true (serverless replicas come and go "
                "between requests); a stateful reward must use kind: dedicated"
            )
        return self

    def resolved_model_path(self, run_name: str) -> str:
        return self.model_path.format(name=run_name)


def placement_problems(reward: RewardConfig, cluster: ClusterConfig) -> list[str]:
    """What is wrong with the reward's placement on ``cluster``; empty when it fits.

    Reward replicas live on ``cluster.roles.reward.pool``, ``units`` each. A dedicated pool has
    ``cluster.roles.reward.replicas`` of them (already counted against the pool); a serverless
    deployment may grow to ``max_replicas``, which must fit in the pool next to the other roles.
    """
    role = cluster.roles.reward
    problems: list[str] = []
    if reward.kind == "dedicated" and role.replicas < 1:
        problems.append("reward.kind 'dedicated' needs cluster.roles.reward.replicas >= 1 (the fixed pool's size)")
    if reward.kind == "serverless":
        if role.replicas != 0:
            problems.append(
                "reward.kind 'serverless' sizes itself (reward.autoscaling); set "
                f"cluster.roles.reward.replicas to 0, not {role.replicas}"
            )
        pool = cluster.pools[role.pool]
        others = _pool_units_of_other_roles(cluster, role.pool)
        need = reward.autoscaling.max_replicas * role.units
        if others + need > pool.count:
            problems.append(
                f"reward.autoscaling.max_replicas={reward.autoscaling.max_replicas} x "
                f"cluster.roles.reward.units={role.units:g} does not fit in cluster.pools.{role.pool} "
                f"(count {pool.count}, other roles use {others:g})"
            )
    return problems


def _pool_units_of_other_roles(cluster: ClusterConfig, pool: str) -> float:
    roles = cluster.roles
    specs = [roles.train, roles.env, *roles.rollout]
    return sum(r.replicas * r.units for r in specs if r.pool == pool)
