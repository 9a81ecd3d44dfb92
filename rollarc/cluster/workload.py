"""Workload profile: the model, the multi-task mix, the batch and the software efficiencies.

A profile is what the planner and the simulator need to know about a training job, and nothing about
the hardware: the same profile is placed on any cluster. Token counts are per turn; the simulator
grows each trajectory's context turn by turn (prompt, response, next prompt, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from rollarc.cluster.distributions import Constant, Distribution
from rollarc.config.io import FrozenModel, load_config

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


class ModelSpec(FrozenModel):
    """The policy. For an MoE, ``active_params`` is what one token touches; memory holds all experts."""

    name: str = "policy"
    total_params: float = Field(gt=0)
    active_params: float | None = Field(default=None, gt=0, description="default: total_params (dense)")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    dtype: Literal["fp32", "bf16", "fp16", "fp8"] = "bf16"

    @model_validator(mode="after")
    def _active_not_above_total(self) -> ModelSpec:
        if self.active_params is not None and self.active_params > self.total_params:
            raise ValueError(f"active_params ({self.active_params:g}) exceeds total_params ({self.total_params:g})")
        return self

    @property
    def n_active(self) -> float:
        return self.active_params if self.active_params is not None else self.total_params

    @property
    def bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, every layer: ``2 · layers · kv_heads · head_dim · bytes``."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param


class RewardSpec(FrozenModel):
    """``rule``: a cheap function (its latency is all it costs). ``model``: a reward model or judge
    that reads the whole trajectory once (a prefill of ``model_params`` over its tokens)."""

    kind: Literal["rule", "model"] = "rule"
    latency_s: Distribution = Field(default_factory=lambda: Constant(value=0.0))
    model_params: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _model_needs_size(self) -> RewardSpec:
        if self.kind == "model" and self.model_params is None:
            raise ValueError("a reward of kind 'model' needs model_params (parameters of the reward model)")
        return self


class TaskProfile(FrozenModel):
    name: str = Field(min_length=1)
    share: float = Field(default=1.0, gt=0, description="relative share of the groups of a step")
    initial_prompt_tokens: Distribution | None = Field(
        default=None, description="first turn's prompt; default prompt_tokens"
    )
    prompt_tokens: Distribution = Field(description="new prompt tokens per turn (observation + template)")
    response_tokens: Distribution = Field(description="generated tokens per turn (long-tailed)")
    turns: Distribution = Field(default_factory=lambda: Constant(value=1), description="turns per trajectory")
    env_latency_s: Distribution = Field(default_factory=lambda: Constant(value=0.0), description="one env.step")
    reward: RewardSpec = Field(default_factory=RewardSpec)

    @property
    def first_prompt(self) -> Distribution:
        return self.initial_prompt_tokens if self.initial_prompt_tokens is not None else self.prompt_tokens

    def max_context_tokens(self) -> float:
        """Longest possible context, when every distribution is capped; inf if any is unbounded."""
        first = self.first_prompt.upper()
        prompt, response = self.prompt_tokens.upper(), self.response_tokens.upper()
        turns = round(self.turns.upper())  # turn counts are sampled rounded to whole turns
        return first + response + max(turns - 1, 0) * (prompt + response)

    def mean_context_tokens(self) -> float:
        """Expected final context (prompts + responses over all turns): what training reads."""
        turns = self.turns.mean()
        return (
            self.first_prompt.mean()
            + self.response_tokens.mean()
            + (turns - 1) * (self.prompt_tokens.mean() + self.response_tokens.mean())
        )


class BatchSpec(FrozenModel):
    groups_per_step: int = Field(gt=0, description="B: GRPO groups per training step")
    group_size: int = Field(gt=0, description="G: rollouts per group")
    max_staleness: int = Field(default=1, ge=0, description="k: 0 is synchronous on-policy")

    @property
    def trajectories_per_step(self) -> int:
        return self.groups_per_step * self.group_size


class Efficiency(FrozenModel):
    """What the software reaches of the hardware peaks. Defaults are typical of vLLM/Megatron-class
    stacks; calibrate them against a real run when you can."""

    prefill_mfu: float = Field(default=0.5, gt=0, le=1)
    decode_mfu: float = Field(default=0.5, gt=0, le=1)
    decode_bw_eff: float = Field(default=0.7, gt=0, le=1)
    train_mfu: float = Field(default=0.35, gt=0, le=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="share of HBM the engine may use")
    iteration_overhead_s: float = Field(default=0.0, ge=0, description="fixed cost of one decode iteration")
    max_batch: int = Field(default=256, gt=0, description="most sequences one engine decodes at once")
    train_bytes_per_param: float = Field(default=16.0, gt=0, description="bf16 weights+grads, fp32 Adam state")
    extra_forward_passes: int = Field(default=0, ge=0, description="reference / old-logprob passes per train step")
    sync_latency_s: float = Field(default=0.0, ge=0, description="fixed latency added to each weight sync")


class Workload(FrozenModel):
    model: ModelSpec
    tasks: list[TaskProfile] = Field(min_length=1)
    batch: BatchSpec
    efficiency: Efficiency = Field(default_factory=Efficiency)

    @model_validator(mode="after")
    def _unique_tasks(self) -> Workload:
        names = [t.name for t in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"task names must be unique; repeated: {', '.join(dup)}")
        return self

    def task(self, name: str) -> TaskProfile:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def groups_per_task(self) -> dict[str, int]:
        return split_groups(self.batch.groups_per_step, {t.name: t.share for t in self.tasks})


def split_groups(groups: int, shares: dict[str, float]) -> dict[str, int]:
    """Split ``groups`` among tasks in proportion to ``shares`` (largest remainder, so the counts
    add up exactly and follow the shares as closely as whole groups allow)."""
    total = sum(shares.values())
    exact = {name: groups * share / total for name, share in shares.items()}
    counts = {name: int(x) for name, x in exact.items()}
    for name in sorted(exact, key=lambda n: exact[n] - counts[n], reverse=True)[: groups - sum(counts.values())]:
        counts[name] += 1
    return counts


def load_workload(path: str | Path, overrides: list[str] | None = None) -> Workload:
    return load_config(Workload, path, overrides)
