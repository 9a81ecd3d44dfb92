"""The learner's sections: the SFT warm start and the RL loop (``train:``, with FSDP and dynamic sampling)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel


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
    eval_deferred: bool = Field(
        False,
        description="the evaluations every eval_every steps score a snapshot of that step's weights later (at the "
        "next checkpoint and at the end, in the driver, eval_threads threads) instead of pausing the run between "
        "steps; before and after RL stay live (docs/async.md#evaluations-off-the-critical-path)",
    )
    eval_threads: int = Field(
        1,
        ge=1,
        description="torch threads of held-out evaluation in the driver process (`rollarc eval`, "
        "train.eval_deferred); "
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
