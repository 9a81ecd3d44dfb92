"""The whole training config (:class:`Config`): it composes the sections and checks the rules across them.

Every section rejects unknown keys, and every cross-field rule is checked here at start-up, so a run
never starts with a setting that would be silently ignored or rewritten. Loaded from YAML plus
``key=value`` overrides by :func:`load_train_config`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from rollarc.algo.config import LossConfig
from rollarc.config.asynchrony import AsyncConfig
from rollarc.config.cluster import ClusterConfig
from rollarc.config.elastic import ElasticChange, elastic_problems
from rollarc.config.harvest import HarvestConfig
from rollarc.config.io import FrozenModel, load_config
from rollarc.config.model import ModelConfig
from rollarc.config.tasks import SamplingConfig, TaskConfig
from rollarc.config.train import FSDPConfig, SFTConfig, TrainConfig
from rollarc.engine.config import EngineConfig
from rollarc.policy.in_flight import in_flight_problems
from rollarc.report.trackers import TrackerName
from rollarc.rewards.config import RewardConfig, placement_problems
from rollarc.serve.config import RolloutConfig
from rollarc.serve.vllm_lora import vllm_lora_problems
from rollarc.sync.config import SyncConfig


def harvest_memory_problems(harvest: HarvestConfig | None, tasks: list[TaskConfig]) -> list[str]:
    """A turn reserves prompt + ``max_tokens_per_turn`` of a co-serving replica's KV budget, up to its task's
    ``agent.context_limit``: a budget below the longest turn would hold that turn there until it timed out."""
    if harvest is None:
        return []
    index, task = max(enumerate(tasks), key=lambda it: it[1].agent.context_limit)
    if harvest.memory_tokens >= task.agent.context_limit:
        return []
    return [
        f"harvest.memory_tokens={harvest.memory_tokens} is below the longest turn: tasks[{index}] ({task.name}) "
        f"allows prompt + max_tokens_per_turn up to agent.context_limit={task.agent.context_limit} tokens, "
        "which would never fit a co-serving replica; raise memory_tokens or lower context_limit"
    ]


class RunConfig(FrozenModel):
    """Where the run directory goes and what is logged while the run goes on."""

    dir: str = Field("runs", description="parent of the run directories (a run writes DIR/NAME-YYYYmmdd-HHMMSS/)")
    progress: bool = Field(True, description="show the live progress bar on stderr")
    tensorboard: bool = Field(True, description="also write the metrics as TensorBoard scalars (RUN_DIR/tensorboard/)")
    trackers: list[TrackerName] = Field(
        [],
        description="also send the metrics, run name and config to these experiment trackers (optional extras "
        "rollarc[wandb], rollarc[mlflow]); where they write comes from their environment variables "
        "(WANDB_MODE, MLFLOW_TRACKING_URI, ...)",
    )
    project: str = Field("rollarc", min_length=1, description="W&B project / MLflow experiment the run is logged under")


class Config(FrozenModel):
    """A training run: the starting policy, the tasks, and the settings of every stage."""

    name: str = Field(
        "run",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="run name: prefixes the run directory and fills `{name}` in artifact paths",
    )
    seed: int = Field(0, description="seeds torch (SFT and trainer) and every group's sampling seeds")
    model: ModelConfig = Field(ModelConfig(), description="the starting policy")
    tasks: list[TaskConfig] = Field(..., description="the environments trained on (at least one; unique names)")
    sampling: SamplingConfig = Field(SamplingConfig(), description="token sampling of rollout turns")
    engine: EngineConfig = Field(
        EngineConfig(), description="the inference engine of every rollout replica and of `rollarc eval`"
    )
    sft: SFTConfig = Field(SFTConfig(), description="the SFT warm start, used when `model.path` is null")
    train: TrainConfig = Field(TrainConfig(), description="the RL loop")
    algo: LossConfig = Field(LossConfig(), description="the policy loss: advantages, clipping, off-policy correction")
    async_: AsyncConfig = Field(AsyncConfig(), alias="async", description="trajectory-level asynchrony")
    cluster: ClusterConfig = Field(ClusterConfig(), description="Ray cluster, pools and role placement")
    sync: SyncConfig = Field(SyncConfig(), description="how new weights reach the rollout replicas")
    reward: RewardConfig = Field(RewardConfig(), description="where the trajectory reward comes from")
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig, description="rollout backend: the built-in engine or OpenAI-compatible servers"
    )
    elastic: list[ElasticChange] = Field(
        [],
        description="rollout replicas added or removed during the run, each after a given step (docs/async.md)",
    )
    harvest: HarvestConfig | None = Field(
        None,
        description="rollouts on borrowed serving capacity: co-serving replicas lent to the router (docs/rose.md); "
        "null: dedicated replicas only",
    )
    run: RunConfig = Field(RunConfig(), description="the run directory and logging")
    plugin_paths: list[str] = Field(
        [],
        description="directories put on PYTHONPATH (driver and every Ray worker) so plugin envs import by entry point",
    )
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
                raise ValueError(
                    f"tasks[{i}].rollout_pool {task.rollout_pool!r} has no rollout replicas "
                    f"(rollout pools: {', '.join(sorted(rollout_pools))})"
                )
        train_end = self.train.seed_base + (self.train.steps + 1) * self.train.groups_per_step * 4
        if self.train.seed_base <= self.train.eval_seed_base < train_end:
            raise ValueError("train.eval_seed_base overlaps the training seeds; held-out seeds must be disjoint")
        if self.sft.seed_base <= self.train.eval_seed_base < self.sft.seed_base + self.sft.episodes:
            raise ValueError("sft.seed_base overlaps the held-out seeds")
        sharded = self.cluster.roles.train.replicas > 1 or self.train.fsdp.on_one_replica
        if not sharded and self.train.fsdp.reshard_after_forward != FSDPConfig().reshard_after_forward:
            raise ValueError(
                "train.fsdp.reshard_after_forward has no effect with one train replica; set "
                "cluster.roles.train.replicas > 1 or train.fsdp.on_one_replica: true"
            )
        problems = placement_problems(self.reward, self.cluster)
        problems += in_flight_problems(self.async_.in_flight_update, self.rollout.backend)
        problems += elastic_problems(self.elastic, self.cluster, self.train.steps)
        if self.elastic and self.rollout.backend != "builtin":
            problems.append("elastic: rollout replicas can change only with rollout.backend: builtin")
        if self.harvest is not None and self.rollout.backend != "builtin":
            problems.append("harvest: borrowed co-serving replicas run only with rollout.backend: builtin")
        if self.train.eval_deferred and self.rollout.backend != "builtin":
            problems.append(
                "train.eval_deferred scores snapshots on the built-in engine in the driver, where the run's own "
                f"evaluations ran on rollout.backend: {self.rollout.backend}; set train.eval_deferred: false"
            )
        problems += harvest_memory_problems(self.harvest, self.tasks)
        problems += lora_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def sft_checkpoint(self) -> Path:
        return Path(self.sft.checkpoint.format(name=self.name))


def lora_problems(cfg: Config) -> list[str]:
    """Where ``model.lora`` cannot run yet, and why (each a one-line problem)."""
    if cfg.model.lora is None:
        return []
    problems = []
    if cfg.cluster.roles.train.replicas > 1 or cfg.train.fsdp.on_one_replica:
        problems.append(
            "model.lora runs on one unsharded train replica: the adapters are a few MB, and FSDP2 would shard "
            "the frozen base with them; set cluster.roles.train.replicas: 1 and train.fsdp.on_one_replica: false"
        )
    if cfg.rollout.backend == "vllm":
        problems += vllm_lora_problems(cfg.model.lora.r, cfg.model.lora.target_modules)
    elif cfg.rollout.backend != "builtin":
        problems.append(
            f"model.lora needs rollout.backend: builtin (replicas merge the adapters) or vllm (applied unmerged), "
            f"not {cfg.rollout.backend}"
        )
    if cfg.harvest is not None:
        problems.append("model.lora does not run with harvest: borrowed co-serving replicas take full weights only")
    return problems


def load_train_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a training config file with overrides; raises ConfigError naming every bad key."""
    return load_config(Config, path, overrides)
