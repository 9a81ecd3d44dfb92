"""What a rollout runs: the ``tasks:`` list (env or dataset, agent loop, latency) and token ``sampling:``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel
from rollarc.data.config import DatasetConfig
from rollarc.envs.latency import LatencyConfig
from rollarc.envs.registry import EnvSpec


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
        description="seconds an env reset, step or tool call may run, counted from when a thread takes it up "
        "(its wait for a free thread is bounded by async.trajectory_timeout_s); past it the trajectory fails "
        "and the stuck thread is counted",
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
