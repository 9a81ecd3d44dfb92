"""The ROSE config (``rollarc loadgen --config``, ``rollarc bench rose --config``): the SLO, the serving model S,
the co-serving guard and the trace replay."""

from __future__ import annotations

from pydantic import Field

from rollarc.configio import FrozenModel
from rollarc.models.presets import PRESETS
from rollarc.rose.slo import SLOConfig


class ServingModelConfig(FrozenModel):
    """The serving model S: a different model from the policy (another preset and seed, or a checkpoint)."""

    preset: str = Field("small", description=f"size preset of S when no checkpoint is given ({', '.join(PRESETS)})")
    seed: int = Field(1234, description="initialisation seed of S (S is not trained: its latency is what matters)")
    checkpoint: str | None = Field(None, description="HF-format directory to serve instead of a fresh preset")
    vocab_size: int = Field(256, ge=2, description="vocabulary of a fresh preset (trace prompts are random ids)")
    max_model_len: int = Field(1024, ge=8, description="prompt + output tokens of one serving request at most")
    max_num_seqs: int = Field(64, ge=1, description="serving requests decoded together at most")


class ReplayConfig(FrozenModel):
    """How a trace is replayed on a tiny model (rollarc.rose.trace)."""

    time_scale: float = Field(1.0, gt=0, description="arrival offsets are divided by this (higher: heavier load)")
    token_scale: float = Field(1 / 16, gt=0, description="prompt and output lengths are multiplied by this")
    offset_s: float = Field(0.0, ge=0, description="skip this many seconds of the (scaled) trace")
    duration_s: float = Field(30.0, gt=0, description="replay this many seconds of the (scaled) trace")
    max_prompt_tokens: int = Field(256, ge=1, description="prompt lengths are clipped to this after scaling")
    max_output_tokens: int = Field(64, ge=1, description="output lengths are clipped to this after scaling")


class RoseConfig(FrozenModel):
    slo: SLOConfig = Field(default_factory=SLOConfig, description="the serving SLO that co-serving must keep")
    serving: ServingModelConfig = Field(default_factory=ServingModelConfig, description="the serving model S")
    replay: ReplayConfig = Field(default_factory=ReplayConfig, description="trace replay knobs")
    margin: float = Field(
        0.2, ge=0, lt=1, description="the guard admits a rollout step only within (1 - margin) x each SLO target"
    )
    memory_tokens: int = Field(
        4096,
        ge=1,
        description="KV tokens the serving and rollout engines of one co-serving worker share (small by default, so a "
        "burst of serving traffic preempts rollout turns on the CPU demo)",
    )
    serving_cores: list[int] = Field(
        default_factory=lambda: [0], description="CPU cores of the serving (co-serving) worker"
    )
    rollout_cores: list[int] = Field(
        default_factory=lambda: [1], description="CPU cores of the dedicated rollout worker (disjoint from serving)"
    )
    withdraw_after_s: float = Field(
        0.5, ge=0, description="a borrowed worker with no headroom for this long gives its rollout turns back"
    )
