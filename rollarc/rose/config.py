"""The ROSE config (``rollarc loadgen --config``, ``rollarc bench rose --config``): the SLO, the serving model S,
the co-serving guard and the trace replay."""

from __future__ import annotations

from pydantic import Field

from rollarc.config.harvest import ReplayConfig, ServingModelConfig, SLOConfig
from rollarc.config.io import FrozenModel


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
        description="KV tokens the serving and rollout engines of the co-serving replica share (small by default, so a "
        "burst of serving traffic preempts rollout turns on the CPU demo)",
    )
    serving_cores: list[int] = Field(
        default_factory=lambda: [0], description="CPU cores the co-serving replica (a Ray actor) is pinned to"
    )
    rollout_cores: list[int] = Field(
        default_factory=lambda: [1],
        description="CPU cores the dedicated RolloutWorker is pinned to (disjoint from serving)",
    )
    lend_after_s: float = Field(
        0.5, ge=0, description="lend the co-serving replica once it has reported headroom for this long (LendingPolicy)"
    )
    withdraw_after_s: float = Field(
        0.5, ge=0, description="a lent replica with no headroom for this long is withdrawn (its turns resume elsewhere)"
    )
    min_capacity: int = Field(1, ge=1, description="headroom (rollout turns the guard admits) needed to lend")
    budget_aftermath: bool = Field(
        True,
        description="the guard budgets the serving step after a rollout step at its prediction times how much longer "
        "such steps have run than predicted (rollarc.rose.aftermath); false: at its prediction",
    )
    dedicated_first: bool = Field(
        False,
        description="a turn without a cached prefix to go back to takes the dedicated worker while it has a free "
        "place, the lent replica only the rest (false, as in training's harvest.dedicated_first: least loaded over "
        "both; rollarc.policy.dispatcher)",
    )
    slo_alone_factor: float = Field(
        1.5,
        ge=0,
        description="rollarc bench rose: the SLO is this factor times the serving-alone run's TTFT and TPOT p99, "
        "measured first at each load point (0: use slo: as given)",
    )
