"""The ``harvest:`` section of a training run (docs/rose.md), and the ROSE config pieces it shares with
``rollarc loadgen`` and ``rollarc bench rose``: the SLO, the serving model S and the trace replay.

It lives in the config layer, below ``rollarc.rose``, so that :class:`rollarc.config.Config` can hold it;
``rollarc.rose.slo`` and ``rollarc.rose.config`` re-export the shared models under their old names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rollarc.config.io import FrozenModel
from rollarc.models.sizes import PRESETS


class SLOConfig(FrozenModel):
    """The ``slo:`` targets of a serving deployment."""

    ttft_p99_ms: float = Field(2000.0, gt=0, description="time to first token target (ms), at the 99th percentile")
    tpot_p99_ms: float = Field(200.0, gt=0, description="time per output token target (ms), at the 99th percentile")


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


class SyntheticTraceConfig(FrozenModel):
    """The synthetic serving trace replayed when ``harvest.trace_path`` is null (``rose.trace.synthetic_trace``)."""

    rate_per_s: float = Field(2.0, gt=0, description="mean Poisson arrival rate outside bursts (requests/s)")
    burst_every_s: float = Field(10.0, ge=0, description="a burst starts every this many seconds (0: no bursts)")
    burst_len_s: float = Field(3.0, ge=0, description="each burst lasts this many seconds")
    burst_factor: float = Field(4.0, ge=1, description="the arrival rate is multiplied by this inside a burst")
    seed: int = Field(0, description="seed of the arrivals and lengths")


class HarvestConfig(FrozenModel):
    """Borrowed serving capacity for rollouts inside ``rollarc train`` (docs/rose.md).

    Each co-serving replica is a Ray actor that serves S on a replayed trace and lends its idle time to the
    policy's rollouts under the SLO guard; the run lends it to the router (pool ``borrowed``) while the guard
    reports headroom and withdraws it when serving load rises.
    """

    replicas: int = Field(
        1,
        ge=1,
        description="co-serving replicas: the members of the borrowed site; each weight update crosses into it once, "
        "in this many shards, one to each member, which forwards its shard to the others (docs/weight-sync.md)",
    )
    serving: ServingModelConfig = Field(
        default_factory=ServingModelConfig, description="the serving model S (not the policy)"
    )
    slo_source: Literal["calibrate", "file", "fixed"] = Field(
        "calibrate",
        description="where the SLO the guard keeps comes from: calibrate (for the first calibration_s of the run, "
        "while training and the dedicated rollouts run and nothing is lent, every co-serving replica serves its trace "
        "window; the SLO is slo_alone_factor x the pooled p99 TTFT and TPOT, recorded in the run directory as "
        "harvest_calibration.json and reused on resume), file (such a recorded calibration, slo_file) or fixed "
        "(slo as given)",
    )
    slo_alone_factor: float = Field(
        1.5,
        gt=0,
        description="calibrate or file: the SLO is this factor times the serving-alone p99 TTFT and TPOT, as "
        "`rollarc bench rose` derives it",
    )
    calibration_s: float = Field(
        30.0,
        gt=0,
        description="calibrate: the serving requests arriving in this many seconds of the replayed window (looped if "
        "longer) are the serving-alone sample, served under the run's own training load with nothing lent; the run "
        "trains meanwhile and starts lending once every one of them has finished",
    )
    calibration_min_requests: int = Field(
        100,
        ge=1,
        description="calibrate: fewer serving requests than this in the sample (all replicas pooled) stop the run: "
        "a p99 needs at least 100 for one request to lie above it",
    )
    slo_file: str | None = Field(
        None,
        description="file: a recorded calibration (a run's harvest_calibration.json); refused unless it was measured on "
        "this trace, window, serving model, device and threads; a relative path is resolved where `rollarc train` runs",
    )
    slo: SLOConfig | None = Field(
        None,
        description="fixed: the serving SLO that lending must keep (only with slo_source: fixed, and needed there)",
    )
    margin: float = Field(
        0.2, ge=0, lt=1, description="the guard admits a rollout step only within (1 - margin) x each SLO target"
    )
    memory_tokens: int = Field(
        4096,
        ge=1,
        description="KV tokens the serving and rollout engines of one co-serving replica share; at least every "
        "task's `agent.context_limit` (the longest turn: prompt + max_tokens_per_turn), checked at start-up",
    )
    trace_path: str | None = Field(
        None,
        description="serving trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens), e.g. the Azure conversation "
        "trace, read from this path; null: the synthetic trace of `synthetic`; a relative path is resolved against the directory `rollarc train` runs in "
        "(the driver's), since the replicas that read it may run elsewhere",
    )
    synthetic: SyntheticTraceConfig = Field(
        default_factory=SyntheticTraceConfig, description="the synthetic trace used without trace_path"
    )

    @field_validator("trace_path", "slo_file")
    @classmethod
    def _absolute_existing_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Resolved where the config is read, so a Ray actor in another working directory finds the same file."""
        if value is None:
            return None
        path = Path(value).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"harvest.{info.field_name} {value} is not a file")
        return str(path)

    @model_validator(mode="after")
    def _one_slo_source(self) -> HarvestConfig:
        """Each source has what it needs, and nothing another source would silently ignore."""
        if self.slo_source == "fixed" and self.slo is None:
            raise ValueError("harvest.slo_source=fixed needs harvest.slo: {ttft_p99_ms: ..., tpot_p99_ms: ...}")
        if self.slo_source != "fixed" and self.slo is not None:
            raise ValueError(
                f"harvest.slo is given but harvest.slo_source is {self.slo_source}: set harvest.slo_source=fixed to "
                "keep it, or drop harvest.slo to use the measured SLO"
            )
        if self.slo_source == "file" and self.slo_file is None:
            raise ValueError("harvest.slo_source=file needs harvest.slo_file (a run's harvest_calibration.json)")
        if self.slo_source != "file" and self.slo_file is not None:
            raise ValueError(f"harvest.slo_file is read only with harvest.slo_source=file (it is {self.slo_source})")
        return self

    replay: ReplayConfig = Field(
        default_factory=lambda: ReplayConfig(duration_s=60.0),
        description="time/token scaling and the window of the trace; the window is replayed in a loop",
    )
    cores: list[int] | None = Field(
        None,
        min_length=1,
        description="pin every co-serving replica to these CPU cores (Linux), e.g. the ones cluster.cores leaves "
        "free: the serving deployment's own hardware on one machine (docs/rose.md#pinned-cores); null: not pinned",
    )
    lend: bool = Field(
        True,
        description="false: the co-serving replicas serve their trace (and calibrate the SLO) but are never lent and "
        "get no weights: the same serving load with nothing borrowed, the baseline of `rollarc bench rose --train`",
    )
    lend_after_s: float = Field(
        0.5, ge=0, description="lend a replica once the guard has reported headroom for this long"
    )
    withdraw_after_s: float = Field(
        0.5, ge=0, description="withdraw a lent replica once it has reported no headroom for this long"
    )
    min_capacity: int = Field(1, ge=1, description="headroom (rollout turns the guard admits) needed to lend")
    budget_aftermath: bool = Field(
        True,
        description="the guard budgets the serving step after a rollout step at its prediction times how much longer "
        "such steps have run than predicted (rollarc.rose.aftermath); false: at its prediction",
    )
    dedicated_first: bool = Field(
        False,
        description="a turn without a cached prefix to go back to takes a dedicated replica while one has a free "
        "place, a lent replica only the rest (false: least loaded over both; rollarc.policy.dispatcher)",
    )
    drain_timeout_s: float = Field(
        0.2, ge=0, description="on withdrawal, in-flight turns may finish this long; the rest are aborted and retried"
    )
    fanout: int = Field(2, ge=1, le=64, description="children per member in the borrowed site's weight fan-out tree")
    poll_s: float = Field(0.1, gt=0, description="how often the driver asks each co-serving replica for its headroom")
    threads: int = Field(1, ge=1, description="torch threads of each co-serving replica")
    replace_dead: bool = Field(
        True, description="start a new co-serving replica when one dies (it catches up with a full weight copy)"
    )
