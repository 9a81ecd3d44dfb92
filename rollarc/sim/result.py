"""What a simulation reports: step time, throughput, per-pool utilisation and bubbles, and cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PoolReport:
    """``busy_fraction``: device-time doing work; ``bubble_fraction`` = 1 − that; ``utilisation``:
    achieved FLOPs over peak FLOPs of the whole pool (None where FLOPs are unknown, e.g. CPU pools
    or calibrated costs)."""

    name: str
    kind: str
    count: int
    busy_device_s: float = 0.0
    flops: float = 0.0
    peak_flops_per_device: float = 0.0
    flops_known: bool = True
    busy_fraction: float = 0.0
    bubble_fraction: float = 1.0
    utilisation: float | None = None

    def add_flops(self, flops: float | None, peak_flops_per_device: float | None) -> None:
        """Work done on this pool; ``None`` (a calibrated cost) makes utilisation unknown."""
        if flops is None or peak_flops_per_device is None:
            self.flops_known = False
            return
        self.flops += flops
        self.peak_flops_per_device = peak_flops_per_device

    def finish(self, total_s: float) -> None:
        capacity = self.count * total_s
        self.busy_fraction = min(self.busy_device_s / capacity, 1.0) if capacity > 0 else 0.0
        self.bubble_fraction = 1.0 - self.busy_fraction
        if not self.flops_known:
            self.utilisation = None
        elif self.peak_flops_per_device > 0:
            self.utilisation = self.flops / (self.peak_flops_per_device * capacity) if capacity > 0 else 0.0
        else:
            self.utilisation = self.busy_fraction  # a CPU pool: busy core fraction

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "count": self.count,
            "busy_fraction": self.busy_fraction,
            "bubble_fraction": self.bubble_fraction,
            "utilisation": self.utilisation,
        }


@dataclass
class SimResult:
    name: str
    mode: str
    placement: str
    steps: int
    total_time_s: float
    step_time_s: float
    steady_step_time_s: float
    trajectories: int
    trajectories_finished: int
    trajectories_per_s: float
    tokens_per_s: float
    generated_tokens: float
    dropped_groups: int
    trained_by_task: dict[str, int]
    mean_staleness: float
    pools: dict[str, PoolReport]
    reward: dict[str, Any]
    price_per_hour: float
    reserved_usd: float
    serverless_usd: float
    events: int
    wall_s: float
    routing: str = "affinity"
    generated_by_task_pool: dict[str, float] = field(default_factory=dict)
    dropped_by_task: dict[str, int] = field(default_factory=dict)  # as the runtime's dropped_groups_by_task
    step_ends: list[float] = field(default_factory=list, repr=False)
    timeline: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def cost_usd(self) -> float:
        return self.reserved_usd + self.serverless_usd

    @property
    def cost_per_step_usd(self) -> float:
        return self.cost_usd / self.steps

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "placement": self.placement,
            "steps": self.steps,
            "step_time_s": self.step_time_s,
            "steady_step_time_s": self.steady_step_time_s,
            "total_time_s": self.total_time_s,
            "trajectories": self.trajectories,
            "trajectories_finished": self.trajectories_finished,
            "trajectories_per_s": self.trajectories_per_s,
            "tokens_per_s": self.tokens_per_s,
            "generated_tokens": self.generated_tokens,
            "dropped_groups": self.dropped_groups,
            "dropped_by_task": self.dropped_by_task,
            "trained_by_task": self.trained_by_task,
            "routing": self.routing,
            "generated_by_task_pool": self.generated_by_task_pool,
            "mean_staleness": self.mean_staleness,
            "pools": {name: pool.as_dict() for name, pool in self.pools.items()},
            "reward": self.reward,
            "cost": {
                "price_per_hour_reserved": self.price_per_hour,
                "reserved_usd": self.reserved_usd,
                "serverless_usd": self.serverless_usd,
                "total_usd": self.cost_usd,
                "per_step_usd": self.cost_per_step_usd,
            },
            "events": self.events,
            "wall_s": self.wall_s,
            "events_per_s": self.events_per_s,
        }
