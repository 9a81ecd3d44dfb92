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
from rollarc.data.config import DatasetConfig
from rollarc.engine.config import EngineConfig
from rollarc.envs.latency import LatencyConfig
from rollarc.envs.registry import EnvSpec
from rollarc.harvest_config import HarvestConfig
from rollarc.policy.scheduler import DEFAULT_MAX_OVERTAKE, DEFAULT_MAX_RESTARTS
from rollarc.report.trackers import TrackerName
from rollarc.rewards.config import RewardConfig, placement_problems
from rollarc.serve.config import RolloutConfig, backend_problems
from rollarc.sync.config import SyncConfig


class LoraConfig(FrozenModel):
    """Train LoRA adapters (``peft``) instead of every weight (``model.lora``; docs/bring-your-own.md).

    The trainer wraps the policy with ``peft.get_peft_model`` and optimises only the adapter matrices; the KL
    reference is the same model with its adapters disabled, so no second copy is held. Weight sync sends only
    the adapter tensors and each rollout replica merges them into its base weights (``rollarc.sync.lora``);
    checkpoints hold the adapter in PEFT's format (``adapter/``) next to the unchanged base (``policy/``).
    """

    r: int = Field(8, ge=1, le=4096, description="rank of every adapter (the inner width of B @ A)")
    alpha: float = Field(
        16.0, gt=0.0, description="scaling numerator: the update added to a weight is (alpha / r) * B @ A"
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="dropout on the adapter's input while training (rollout replicas run the merged weights, "
        "without dropout)",
    )
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="names (last path component) of the linear layers that get an adapter; one that matches "
        "no module of the policy is an error at start-up",
    )

    @property
    def scaling(self) -> float:
        """What peft multiplies B @ A by (``lora_alpha / r``, no rsLoRA)."""
        return self.alpha / self.r


class ModelConfig(FrozenModel):
    """Where the policy starts: an HF-format directory, or a fresh preset (trained by SFT first).

    ``device`` and ``dtype`` apply to the roles that hold the model (train, rollout), resolved inside
    each actor (see ``rollarc.models.device``). With ``dtype: bfloat16`` the engine holds bf16 weights
    and KV (``engine.dtype`` overrides), and training keeps float32 master weights and optimiser state
    while its forward passes run under bf16 autocast (see ``rollarc.train.policy_trainer``).
    """

    path: str | None = Field(
        None,
        description="HF-format directory of the starting policy (weights, tokenizer, "
        "chat template); null: build `preset` and warm-start it by SFT",
    )
    preset: Literal["nano", "tiny", "small"] = Field(
        "tiny", description="size of the fresh Llama-architecture policy built when `path` is null"
    )
    max_position_embeddings: int = Field(
        1024, ge=64, le=1 << 20, description="context length of a fresh preset (a `path` checkpoint keeps its own)"
    )
    init_seed: int = Field(0, description="seed of a fresh preset's random initial weights")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where the train and rollout roles compute: "
        "auto = cuda when the actor sees a GPU, else "
        "cpu (docs/gpu.md)",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="compute dtype of the train and rollout "
        "roles: bf16 engine, fp32 master weights "
        "with bf16 autocast for training",
    )
    lora: LoraConfig | None = Field(
        None,
        description="train LoRA adapters instead of every weight, and sync only the adapters (null: full fine-tuning)",
    )


class SamplingConfig(FrozenModel):
    """How rollout turns sample tokens; the trainer recomputes log-probs at the same temperature."""

    temperature: float = Field(
        1.0, ge=0.0, le=10.0, description="sampling temperature (0: greedy); the trainer divides logits by it too"
    )
    top_p: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="nucleus sampling: keep the most likely tokens whose probabilities sum to top_p (1: off)",
    )
    top_k: int = Field(0, ge=0, description="sample among the k most likely tokens only (0: off)")


class AgentConfig(FrozenModel):
    """The multi-turn agent loop of a task: turns, tokens per turn, and the history the model sees."""

    max_turns: int = Field(10, ge=1, le=1000, description="turns at most per episode (the env may end it sooner)")
    max_tokens_per_turn: int = Field(16, ge=1, description="tokens the model may generate in one reply")
    history: Literal["full", "last_k"] = Field(
        "full",
        description="`full`: the prompt is the whole conversation; "
        "`last_k`: the system message, the last "
        "`history_k` exchanges and the current observation",
    )
    history_k: int = Field(0, ge=0, description="(reply, observation) exchanges kept with `history: last_k`")
    context_limit: int = Field(
        1024,
        ge=8,
        description="prompt + max_tokens_per_turn at most, in tokens; a turn "
        "that would exceed it ends the episode (finish "
        "`context_limit`) instead of being cut",
    )
    instructions: bool = Field(True, description="send the env's instructions as a system message")


DATASET_ENV = "rollarc.data.env:DatasetEnv"


class TaskConfig(FrozenModel):
    """One task of the mix: an environment, or a dataset of prompts with reward functions. Groups never mix tasks."""

    name: str = Field(
        ...,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the task's name in metrics, summaries and routing; unique among `tasks`",
    )
    env: EnvSpec | None = Field(None, description="the environment to build and its kwargs (or `dataset`)")
    dataset: DatasetConfig | None = Field(
        None,
        description="a single-turn task over dataset rows, scored by reward functions (instead of `env`; "
        "docs/bring-your-own.md)",
    )
    weight: float = Field(
        1.0,
        gt=0.0,
        description="share of admitted groups, relative to the other tasks' weights (smooth weighted round-robin)",
    )
    agent: AgentConfig = Field(AgentConfig(), description="the agent loop of this task")
    rollout_pool: str | None = Field(
        None,
        description="pool whose rollout replicas this task's turns prefer "
        "(hardware affinity; others take over when it is full); "
        "null: any rollout replica",
    )
    step_timeout_s: float = Field(
        30.0,
        gt=0.0,
        description="seconds an env reset or step may take; past it the "
        "trajectory fails and the stuck thread is counted",
    )
    latency: LatencyConfig = Field(
        LatencyConfig(), description="injected env-step delay and failures, a model of slow, flaky tools"
    )
    inline_env_steps: bool = Field(
        False,
        description="run env reset/step on the EnvWorker's event loop, not in its thread pool: for envs whose "
        "steps take microseconds, where the thread hop costs more than the step; step_timeout_s then cannot "
        "interrupt a step (docs/performance.md)",
    )

    @model_validator(mode="after")
    def _env_or_dataset(self) -> TaskConfig:
        if (self.env is None) == (self.dataset is None):
            raise ValueError(f"task {self.name!r}: give exactly one of env or dataset")
        if self.inline_env_steps and self.dataset is not None and self.dataset.reward_placement == "serverless":
            raise ValueError(
                f"task {self.name!r}: dataset.reward_placement 'serverless' waits for the reward service in env "
                "steps, which must not block the env worker's event loop; set inline_env_steps: false"
            )
        return self

    @property
    def env_spec(self) -> EnvSpec:
        """The env to build: ``env``, or the single-turn :class:`rollarc.data.env.DatasetEnv` over ``dataset``."""
        if self.env is not None:
            return self.env
        assert self.dataset is not None  # the validator requires env or dataset
        return EnvSpec(entry_point=DATASET_ENV, kwargs=self.dataset.model_dump())


class SFTConfig(FrozenModel):
    """Warm start by behaviour cloning of the environments' solvers."""

    checkpoint: str = Field(
        "artifacts/sft/{name}",
        description="directory of the warm start (`{name}`: the run name); trained when missing, reused when present",
    )
    episodes: int = Field(2000, ge=1, description="solver demonstration episodes to clone")
    steps: int = Field(200, ge=0, description="AdamW steps of SFT")
    batch_size: int = Field(64, ge=1, description="demonstration rows per SFT step")
    lr: float = Field(1e-3, gt=0.0, description="peak learning rate (linear warmup, then cosine decay to 10%)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay of SFT")
    warmup_steps: int = Field(10, ge=0, description="linear learning-rate warmup steps of SFT")
    seed_base: int = Field(
        10_000_000,
        ge=0,
        description="env seed of the first demonstration (episode i: "
        "seed_base + i); must not overlap the held-out seeds",
    )
    eval_episodes: int = Field(200, ge=0, description="held-out greedy episodes scored after SFT (0: none)")
    threads: int = Field(
        1,
        ge=1,
        description="torch threads of SFT in the driver (demonstrations, training and its held-out score), "
        "pinned as each Ray actor pins its own: more threads than free cores slow it down many times",
    )


class FSDPConfig(FrozenModel):
    """FSDP2 training over ``cluster.roles.train.replicas`` ranks (see docs/fsdp.md)."""

    reshard_after_forward: bool = Field(
        True,
        description="free each decoder layer's gathered weights after its "
        "forward pass (less memory, one more all-gather in the backward pass)",
    )
    on_one_replica: bool = Field(
        False,
        description="run the FSDP rank actor even with one train replica (a "
        "one-rank process group); by default one replica is the plain TrainWorker",
    )


class DynamicSamplingConfig(FrozenModel):
    """DAPO's dynamic sampling (docs/algorithms.md#dynamic-sampling): groups whose rewards are all equal carry no
    gradient; they are dropped before a batch and admission starts others in their place."""

    enabled: bool = Field(False, description="drop groups whose rewards are all equal before they reach a batch")
    max_drops_per_step: int = Field(
        64,
        ge=1,
        description="groups dropped for no signal between two batches at most, so a task with no signal "
        "cannot stall the run; past it, `when_exhausted` applies",
    )
    when_exhausted: Literal["train", "stop"] = Field(
        "train",
        description="past max_drops_per_step: `train` trains such groups as they are (zero advantage) until the "
        "next batch; `stop` stops the run with a message",
    )

    @model_validator(mode="after")
    def _settings_need_enabled(self) -> DynamicSamplingConfig:
        defaults = type(self).model_fields
        changed = [k for k in ("max_drops_per_step", "when_exhausted") if getattr(self, k) != defaults[k].default]
        if changed and not self.enabled:
            raise ValueError(f"{', '.join(changed)} has no effect unless enabled: true")
        return self


class TrainConfig(FrozenModel):
    """The RL loop: batch shape, optimiser, held-out evaluation and checkpoints."""

    steps: int = Field(20, ge=0, description="training steps, i.e. new policy versions, to run")
    groups_per_step: int = Field(8, ge=1, description="B: GRPO groups per training step")
    group_size: int = Field(8, ge=2, description="G: rollouts of the same task seed")
    lr: float = Field(3e-4, gt=0.0, description="AdamW learning rate of the policy")
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warmup over the first training steps")
    lr_decay: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="after the warmup: keep `lr` (`constant`), or decay it linearly or along a cosine so that the "
        "last of `steps` runs at lr * lr_min_ratio",
    )
    lr_min_ratio: float = Field(
        0.1, ge=0.0, le=1.0, description="the decay's floor as a fraction of `lr` (`linear` and `cosine` only)"
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2)")
    grad_clip: float = Field(1.0, gt=0.0, description="gradients are clipped to this global L2 norm")
    minibatches: int = Field(
        1, ge=1, description="optimiser updates per epoch: the step's batch is split into this many minibatches"
    )
    epochs: int = Field(
        1, ge=1, description="passes over the step's batch; only the step's end is published as a new version"
    )
    micro_batch_tokens: int = Field(
        16384,
        ge=64,
        description="padded tokens per forward/backward micro-batch (gradients accumulate across them; bounds memory)",
    )
    dedup_rows: bool = Field(True, description="one forward pass per distinct token sequence (exact)")
    eval_every: int = Field(
        10,
        ge=0,
        description="held-out evaluation every this many steps, besides before and "
        "after training (0: only before and after)",
    )
    eval_episodes: int = Field(200, ge=0, description="held-out episodes per evaluation (0: none)")
    eval_temperature: float = Field(
        0.0,
        ge=0.0,
        le=10.0,
        description="held-out evaluation: 0 is greedy; above 0 it samples at this temperature (with the "
        "rollout's top_p and top_k), episode i with seed eval_seed_base + i, the same in every evaluation",
    )
    eval_threads: int = Field(
        1,
        ge=1,
        description="torch threads of held-out evaluation in the driver process (`rollarc eval`); "
        "evaluation during a run uses the env and rollout actors' own threads",
    )
    checkpoint_every: int = Field(
        10,
        ge=0,
        description="checkpoint every this many steps; the last step is always checkpointed (0: only the last)",
    )
    keep_last_checkpoints: int = Field(
        3,
        ge=0,
        description="after each checkpoint, delete the older ones beyond the last this many (never the one just "
        "written); a damaged latest one then still has a previous one to resume from (0: keep every checkpoint)",
    )
    seed_base: int = Field(0, ge=0, description="env seed of the first training group (group i: seed_base + i)")
    eval_seed_base: int = Field(
        20_000_000,
        ge=0,
        description="env seed of the first held-out episode; must not overlap the training or SFT seeds",
    )
    max_trainer_restarts: int = Field(
        3,
        ge=0,
        description="a lost trainer is restarted from the last checkpoint at most this many times in a run; one "
        "more loss stops the run with an error (docs/failures.md#bounded-retries)",
    )
    fsdp: FSDPConfig = Field(FSDPConfig(), description="sharded training when cluster.roles.train.replicas > 1")
    dynamic_sampling: DynamicSamplingConfig = Field(
        DynamicSamplingConfig(), description="drop groups with all-equal rewards before a batch (DAPO)"
    )

    @model_validator(mode="after")
    def _floor_needs_decay(self) -> TrainConfig:
        if self.lr_decay == "constant" and self.lr_min_ratio != type(self).model_fields["lr_min_ratio"].default:
            raise ValueError(
                f"lr_min_ratio={self.lr_min_ratio} has no effect with lr_decay='constant'; "
                "set lr_decay to 'linear' or 'cosine'"
            )
        return self


class AsyncConfig(FrozenModel):
    """Trajectory-level asynchrony. ``mode: sync`` is max_staleness 0 plus a barrier."""

    mode: Literal["sync", "async"] = Field(
        "sync", description="`sync`: generate, train and sync in lockstep; `async`: rollout never waits for training"
    )
    max_staleness: int = Field(
        0, ge=0, description="k: no trained token is more than k policy versions old (must be 0 in sync mode)"
    )
    max_overtake: int = Field(
        DEFAULT_MAX_OVERTAKE,
        ge=0,
        description="batches follow admission order: a batch is the groups_per_step earliest-admitted finished "
        "groups, and it may pass over at most this many older groups still running (each stays first in line); "
        "0: strict admission order (docs/async.md#batch-order)",
    )
    on_stale: Literal["drop", "restart"] = Field(
        "drop",
        description="a finished group with no token within max_staleness of the step is dropped, or run again "
        "from scratch with fresh sampling seeds (at most `max_restarts` times, then dropped); both are counted",
    )
    max_restarts: int = Field(
        DEFAULT_MAX_RESTARTS,
        ge=0,
        description="with on_stale: restart, how many times one group is run again before it is dropped",
    )
    in_flight_update: Literal["finish", "abort", "continue"] = Field(
        "finish",
        description="when new weights reach a replica with running turns: `finish` them on the old "
        "weights first, `abort` them and resume each from its partial output on the new ones (the kept tokens "
        "keep their versions and log-probs), or `continue` them on the new weights from the next decode step; "
        "with `abort` and `continue` a turn may mix versions (docs/async.md#in-flight-weight-updates)",
    )
    redundancy: int = Field(
        0,
        ge=0,
        description="r: start G+r rollouts per group; rollouts G..G+r-1 are spares, kept as `redundancy_keep` says",
    )
    redundancy_keep: Literal["by_index", "first_finished"] = Field(
        "by_index",
        description="with redundancy > 0, which G rollouts a group keeps. `by_index`: the first G by rollout index "
        "that finished well; a spare only replaces a rollout that failed (error, timeout, ...), and a slow one is "
        "waited for, so the choice does not depend on finishing order. `first_finished`: the first G to finish "
        "well; cuts stragglers but favours short episodes "
        "(docs/failures.md#redundant-rollouts-favour-short-episodes). Must stay `by_index` with redundancy 0",
    )
    trajectory_timeout_s: float = Field(
        600.0, gt=0.0, description="a trajectory running longer fails (its in-flight turn is aborted)"
    )
    max_group_retries: int = Field(
        3,
        ge=0,
        description="a group (or a chunk of held-out episodes) whose EnvWorker dies is run again on a fresh one, "
        "same seed, at most this many times; one more death stops the run with an error naming its task and seed "
        "(the env or a plugin crashes its process there; docs/failures.md#bounded-retries)",
    )
    max_stuck_env_threads: int = Field(
        128,
        ge=1,
        description="env threads per EnvWorker that may be stuck in env code past step_timeout_s (a thread cannot "
        "be killed, and a replaced pool's stuck threads live on); at this many the worker starts no env call and "
        "the run stops with an error naming it (docs/failures.md#hung-environments)",
    )
    max_failed_fraction: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="stop the run when more than this share of the last groups_per_step × (group_size + "
        "redundancy) finished training trajectories failed (1: never stop for failures; docs/failures.md)",
    )

    @model_validator(mode="after")
    def _sync_has_no_staleness(self) -> AsyncConfig:
        if self.mode == "sync" and self.max_staleness != 0:
            raise ValueError("async.max_staleness must be 0 when async.mode is 'sync' (use mode: async)")
        return self

    @model_validator(mode="after")
    def _restarts_need_restart(self) -> AsyncConfig:
        if self.on_stale == "drop" and self.max_restarts != type(self).model_fields["max_restarts"].default:
            raise ValueError(
                f"async.max_restarts={self.max_restarts} has no effect with async.on_stale='drop'; "
                "set on_stale: restart or remove max_restarts"
            )
        return self

    @model_validator(mode="after")
    def _keep_rule_needs_spares(self) -> AsyncConfig:
        if self.redundancy == 0 and self.redundancy_keep != type(self).model_fields["redundancy_keep"].default:
            raise ValueError(
                f"async.redundancy_keep={self.redundancy_keep!r} has no effect with async.redundancy=0; "
                "set async.redundancy > 0 or remove redundancy_keep"
            )
        return self


class ElasticChange(FrozenModel):
    """One change of the rollout membership, made right after a training step's weights reach every replica."""

    at_step: int = Field(
        ..., ge=1, description="apply once this training step (policy version) is synced; must be below train.steps"
    )
    pool: str | None = Field(
        None,
        description="the rollout pool whose replicas change; its first `cluster.roles.rollout` entry gives "
        "the units and threads of an added replica (null: the first rollout entry's pool)",
    )
    add: int = Field(
        0,
        ge=0,
        description="replicas to start; each fetches a full copy of the current weights before it serves, "
        "then takes the same deltas as the others",
    )
    remove: int = Field(
        0,
        ge=0,
        description="replicas of the pool to stop, newest first: each stops taking new turns, its in-flight "
        "turns finish (drain), and what is still running after `drain_timeout_s` is aborted and resumed "
        "from its partial output on the remaining replicas",
    )
    drain_timeout_s: float = Field(
        30.0, ge=0.0, description="seconds a removed replica's in-flight turns may take to finish before abort"
    )

    @model_validator(mode="after")
    def _one_change(self) -> ElasticChange:
        if (self.add > 0) == (self.remove > 0):
            raise ValueError(f"elastic change at_step {self.at_step}: set exactly one of add or remove (> 0)")
        return self


def elastic_pool(change: ElasticChange, cluster: ClusterConfig) -> str:
    return change.pool if change.pool is not None else cluster.roles.rollout[0].pool


def rollout_replicas_at(elastic: list[ElasticChange], cluster: ClusterConfig, version: int) -> dict[str, int]:
    """Rollout replicas per pool once the changes up to ``version`` are applied (a resumed run starts so)."""
    count: dict[str, int] = {}
    for role in cluster.roles.rollout:
        count[role.pool] = count.get(role.pool, 0) + role.replicas
    for change in elastic:
        if change.at_step <= version:
            pool = elastic_pool(change, cluster)
            count[pool] = count.get(pool, 0) + change.add - change.remove
    return count


def rollout_entry_replicas(elastic: list[ElasticChange], cluster: ClusterConfig, version: int) -> list[int]:
    """Replicas of each ``cluster.roles.rollout`` entry at ``version``: a pool's first entry takes the changes."""
    extra = rollout_replicas_at(elastic, cluster, version)
    for role in cluster.roles.rollout:
        extra[role.pool] -= role.replicas
    counts = []
    for role in cluster.roles.rollout:
        count = max(0, role.replicas + extra[role.pool])  # removals beyond the first entry go on to the next
        extra[role.pool] -= count - role.replicas
        counts.append(count)
    return counts


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


def elastic_problems(elastic: list[ElasticChange], cluster: ClusterConfig, steps: int) -> list[str]:
    """What would make the schedule fail mid-run, found at load time: unknown pools, too few or too many replicas."""
    problems = []
    rollout_pools = [r.pool for r in cluster.roles.rollout]
    for i, change in enumerate(elastic):
        if change.pool is not None and change.pool not in rollout_pools:
            problems.append(
                f"elastic[{i}].pool {change.pool!r} has no cluster.roles.rollout entry "
                f"(rollout pools: {', '.join(sorted(set(rollout_pools)))})"
            )
        if change.at_step >= steps:
            problems.append(
                f"elastic[{i}].at_step {change.at_step} is never reached before the run ends "
                f"(train.steps is {steps}; use at_step < {steps})"
            )
    if problems:
        return problems
    used = {pool: 0.0 for pool in cluster.pools}
    for role in [cluster.roles.train, cluster.roles.env, cluster.roles.reward]:
        used[role.pool] += role.replicas * role.units
    units = {}
    for role in reversed(cluster.roles.rollout):
        units[role.pool] = role.units  # the pool's first entry gives an added replica's units
        used[role.pool] += role.replicas * role.units
    for step in sorted({c.at_step for c in elastic}):
        before = rollout_replicas_at(elastic, cluster, step - 1)
        after = rollout_replicas_at(elastic, cluster, step)
        for pool, n in after.items():
            if n < 0:
                problems.append(f"elastic: at_step {step} removes more {pool} rollout replicas than run there")
            used[pool] += (n - before.get(pool, 0)) * units[pool]
            if used[pool] > cluster.pools[pool].count:
                problems.append(
                    f"elastic: at_step {step} the roles need {used[pool]:g} units of pool {pool} "
                    f"but cluster.pools.{pool}.count is {cluster.pools[pool].count}"
                )
        if sum(after.values()) < 1:
            problems.append(f"elastic: at_step {step} would leave no rollout replica (at least 1 must remain)")
    return problems


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
        problems += backend_problems(self.rollout, self.async_.in_flight_update)
        problems += elastic_problems(self.elastic, self.cluster, self.train.steps)
        if self.elastic and self.rollout.backend != "builtin":
            problems.append("elastic: rollout replicas can change only with rollout.backend: builtin")
        if self.harvest is not None and self.rollout.backend != "builtin":
            problems.append("harvest: borrowed co-serving replicas run only with rollout.backend: builtin")
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
    if cfg.rollout.backend != "builtin":
        problems.append("model.lora needs rollout.backend: builtin (its replicas merge the synced adapters)")
    if cfg.harvest is not None:
        problems.append("model.lora does not run with harvest: borrowed co-serving replicas take full weights only")
    return problems


def load_train_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a training config file with overrides; raises ConfigError naming every bad key."""
    return load_config(Config, path, overrides)
