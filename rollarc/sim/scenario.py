"""A simulation scenario: which workload, on which placement, in which mode, for how many steps.

The placement is the same fragment the planner writes and ``rollarc train`` reads (``cluster:`` and
``tasks:``), so a plan can be simulated as it is. Paths inside a scenario are relative to the
scenario file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from rollarc.cluster.catalogue import Catalogue, load_catalogue
from rollarc.cluster.fragment import ClusterSpec, PlacementFragment, TaskPlacement, check_task_pools
from rollarc.cluster.workload import Workload, load_workload
from rollarc.config.io import ConfigError, FrozenModel, load_config


class RewardService(FrozenModel):
    """How model-based rewards are served. ``dedicated``: ``roles.reward`` replicas, always paid.
    ``serverless``: instances of ``device`` started on demand, paid per second used."""

    mode: Literal["dedicated", "serverless"] = "serverless"
    device: str | None = Field(
        default=None, description="serverless instance GPU kind (default: the reward pool's kind)"
    )
    cold_start_s: float = Field(default=30.0, ge=0)
    keep_alive_s: float = Field(default=60.0, ge=0)
    max_instances: int = Field(default=256, gt=0)
    price_markup: float = Field(default=1.5, gt=0, description="serverless price / on-demand device price")


class Scenario(FrozenModel):
    name: str = "scenario"
    catalogue: str = Field(description="hardware catalogue YAML, relative to this file")
    workload: str = Field(description="workload profile YAML, relative to this file")
    workload_overrides: list[str] = Field(default_factory=list, description="dotted key=value applied to the workload")
    steps: int = Field(default=10, gt=0)
    seed: int = 0
    mode: Literal["sync", "async"] = "async"
    max_staleness: int | None = Field(
        default=None, ge=0, description="async only; default: the workload's batch.max_staleness"
    )
    placement: Literal["disaggregated", "colocated"] = "disaggregated"
    colocate_switch_s: float = Field(
        default=0.0, ge=0, description="colocated: time to switch the GPUs between rollout and training"
    )
    routing: Literal["affinity", "random"] = Field(
        default="affinity",
        description="affinity: a task's trajectories run on its rollout_pool; random: on any engine of any rollout "
        "pool (least loaded), task-oblivious (the baseline that shows what affinity routing buys)",
    )
    spot_pools: list[str] = Field(default_factory=list, description="pools billed at the spot price")
    cluster: ClusterSpec
    tasks: list[TaskPlacement] = Field(min_length=1)
    reward: RewardService = Field(default_factory=RewardService)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        check_task_pools(self.cluster, self.tasks)
        if self.mode == "sync" and self.max_staleness not in (None, 0):
            raise ValueError(f"mode 'sync' is max_staleness 0; got max_staleness={self.max_staleness}")
        if self.mode == "async" and self.max_staleness == 0:
            raise ValueError("mode 'async' needs max_staleness >= 1 (0 is mode 'sync')")
        if self.placement == "colocated" and self.mode != "sync":
            raise ValueError(
                "placement 'colocated' time-shares the GPUs between rollout and training, so mode must be 'sync'"
            )
        unknown = sorted(set(self.spot_pools) - set(self.cluster.pools))
        if unknown:
            raise ValueError(f"spot_pools names unknown pool(s): {', '.join(unknown)}")
        return self

    @property
    def fragment(self) -> PlacementFragment:
        return PlacementFragment(cluster=self.cluster, tasks=self.tasks)


class LoadedScenario(FrozenModel):
    """A scenario with its catalogue and workload read, and the staleness bound resolved."""

    scenario: Scenario
    catalogue: Catalogue
    workload: Workload
    max_staleness: int
    source: str


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> LoadedScenario:
    path = Path(path)
    scenario = load_config(Scenario, path, overrides)
    base = path.parent
    catalogue = load_catalogue(base / scenario.catalogue)
    workload = load_workload(base / scenario.workload, scenario.workload_overrides)
    task_names = {t.name for t in workload.tasks}
    placed = {t.name for t in scenario.tasks}
    if placed != task_names:
        raise ConfigError(
            f"{path}: tasks must place every workload task exactly once; workload has {sorted(task_names)}, "
            f"scenario places {sorted(placed)}"
        )
    k = (
        0
        if scenario.mode == "sync"
        else (scenario.max_staleness if scenario.max_staleness is not None else workload.batch.max_staleness)
    )
    if scenario.mode == "async" and k == 0:
        raise ConfigError(f"{path}: mode 'async' but the workload's batch.max_staleness is 0; set max_staleness >= 1")
    return LoadedScenario(scenario=scenario, catalogue=catalogue, workload=workload, max_staleness=k, source=str(path))
