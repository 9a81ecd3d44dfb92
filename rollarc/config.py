"""The training config: frozen, validated pydantic models, loaded from YAML plus ``key=value`` overrides.

Every section rejects unknown keys, and every cross-field rule is checked here at start-up, so a run
never starts with a setting that would be silently ignored or rewritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from rollarc.algo.config import LossConfig
from rollarc.cluster_config import ClusterConfig
from rollarc.cluster_config import PoolConfig as PoolConfig  # re-exported: callers import them from here
from rollarc.cluster_config import RoleConfig as RoleConfig
from rollarc.cluster_config import RolesConfig as RolesConfig
from rollarc.configio import FrozenModel, load_config
from rollarc.engine.config import EngineConfig
from rollarc.envs.latency import LatencyConfig
from rollarc.envs.registry import EnvSpec
from rollarc.rewards.config import RewardConfig, placement_problems
from rollarc.sync.config import SyncConfig


class ModelConfig(FrozenModel):
    """Where the policy starts: an HF-format directory, or a fresh preset (trained by SFT first)."""

    path: str | None = None
    preset: Literal["nano", "tiny", "small"] = "tiny"
    max_position_embeddings: int = Field(1024, ge=64, le=1 << 20)
    init_seed: int = 0


class SamplingConfig(FrozenModel):
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)


class AgentConfig(FrozenModel):
    max_turns: int = Field(10, ge=1, le=1000)
    max_tokens_per_turn: int = Field(16, ge=1)
    history: Literal["full", "last_k"] = "full"
    history_k: int = Field(0, ge=0)
    context_limit: int = Field(1024, ge=8)
    instructions: bool = Field(True, description="send the env's instructions as a system message")


class TaskConfig(FrozenModel):
    """One environment of the task mix. Groups never mix tasks."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    env: EnvSpec
    weight: float = Field(1.0, gt=0.0)
    agent: AgentConfig = AgentConfig()
    rollout_pool: str | None = None
    step_timeout_s: float = Field(30.0, gt=0.0)
    latency: LatencyConfig = LatencyConfig()


class SFTConfig(FrozenModel):
    """Warm start by behaviour cloning of the environments' solvers."""

    checkpoint: str = "artifacts/sft/{name}"
    episodes: int = Field(2000, ge=1)
    steps: int = Field(200, ge=0)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    warmup_steps: int = Field(10, ge=0)
    seed_base: int = Field(10_000_000, ge=0)
    eval_episodes: int = Field(200, ge=0)


class TrainConfig(FrozenModel):
    steps: int = Field(20, ge=0)
    groups_per_step: int = Field(8, ge=1, description="B: GRPO groups per training step")
    group_size: int = Field(8, ge=2, description="G: rollouts of the same task seed")
    lr: float = Field(3e-4, gt=0.0)
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warmup over the first training steps")
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0.0)
    minibatches: int = Field(1, ge=1)
    epochs: int = Field(1, ge=1)
    micro_batch_tokens: int = Field(16384, ge=64)
    dedup_rows: bool = Field(True, description="one forward pass per distinct token sequence (exact)")
    eval_every: int = Field(10, ge=0, description="0: only before and after training")
    eval_episodes: int = Field(200, ge=0)
    eval_temperature: float = Field(0.0, ge=0.0)
    checkpoint_every: int = Field(10, ge=0)
    seed_base: int = Field(0, ge=0)
    eval_seed_base: int = Field(20_000_000, ge=0)


class AsyncConfig(FrozenModel):
    """Trajectory-level asynchrony. ``mode: sync`` is max_staleness 0 plus a barrier."""

    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(0, ge=0)
    on_stale: Literal["drop", "restart"] = "drop"
    in_flight_update: Literal["finish", "abort", "continue"] = "finish"
    redundancy: int = Field(0, ge=0, description="r: start G+r rollouts per group, keep the first G")
    trajectory_timeout_s: float = Field(600.0, gt=0.0)
    max_failed_fraction: float = Field(0.5, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sync_has_no_staleness(self) -> AsyncConfig:
        if self.mode == "sync" and self.max_staleness != 0:
            raise ValueError("async.max_staleness must be 0 when async.mode is 'sync' (use mode: async)")
        return self


class RunConfig(FrozenModel):
    dir: str = "runs"
    progress: bool = True
    tensorboard: bool = True


class Config(FrozenModel):
    name: str = Field("run", pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    model: ModelConfig = ModelConfig()
    tasks: list[TaskConfig]
    sampling: SamplingConfig = SamplingConfig()
    engine: EngineConfig = EngineConfig()
    sft: SFTConfig = SFTConfig()
    train: TrainConfig = TrainConfig()
    algo: LossConfig = LossConfig()
    async_: AsyncConfig = Field(AsyncConfig(), alias="async")
    cluster: ClusterConfig = ClusterConfig()
    sync: SyncConfig = SyncConfig()
    reward: RewardConfig = RewardConfig()
    run: RunConfig = RunConfig()
    plugin_paths: list[str] = Field([], description="directories put on PYTHONPATH (driver and every Ray "
                                                    "worker) so plugin envs import by entry point")
    resume: str | None = Field(None, description="a run directory to resume from its last checkpoint")

    model_config = FrozenModel.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        names = [t.name for t in self.tasks]
        if not names:
            raise ValueError("tasks: at least one task is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"tasks: names must be unique, got {names}")
        rollout_pools = {r.pool for r in self.cluster.roles.rollout}
        for i, task in enumerate(self.tasks):
            if task.rollout_pool is not None and task.rollout_pool not in rollout_pools:
                raise ValueError(f"tasks[{i}].rollout_pool {task.rollout_pool!r} has no rollout replicas "
                                 f"(rollout pools: {', '.join(sorted(rollout_pools))})")
        train_end = self.train.seed_base + (self.train.steps + 1) * self.train.groups_per_step * 4
        if self.train.seed_base <= self.train.eval_seed_base < train_end:
            raise ValueError("train.eval_seed_base overlaps the training seeds; held-out seeds must be disjoint")
        if self.sft.seed_base <= self.train.eval_seed_base < self.sft.seed_base + self.sft.episodes:
            raise ValueError("sft.seed_base overlaps the held-out seeds")
        problems = placement_problems(self.reward, self.cluster)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def sft_checkpoint(self) -> Path:
        return Path(self.sft.checkpoint.format(name=self.name))


def load_train_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a training config file with overrides; raises ConfigError naming every bad key."""
    return load_config(Config, path, overrides)
