"""The placement fragment of a rollarc config: pools, role mapping and each task's rollout pool.

This is the contract between the planner (which writes it), the simulator (which reads it inside a
scenario) and ``rollarc train`` (which places Ray actors by it). The keys are exactly those of the
``cluster:`` and ``tasks:`` sections of a training config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel


class PoolSpec(FrozenModel):
    count: int = Field(ge=0)
    kind: str = Field(min_length=1, description="a catalogue GPU name or CPU node type")


class RoleSpec(FrozenModel):
    pool: str
    replicas: int = Field(ge=0)
    units: int = Field(default=1, gt=0, description="devices (or nodes) of the pool one replica uses")

    @property
    def devices(self) -> int:
        return self.replicas * self.units


class RolesSpec(FrozenModel):
    train: RoleSpec
    env: RoleSpec
    reward: RoleSpec
    rollout: list[RoleSpec] = Field(min_length=1)


class ClusterSpec(FrozenModel):
    pools: dict[str, PoolSpec] = Field(min_length=1)
    roles: RolesSpec

    @model_validator(mode="after")
    def _roles_name_pools(self) -> ClusterSpec:
        named = [("train", self.roles.train), ("env", self.roles.env), ("reward", self.roles.reward)]
        named += [(f"rollout[{i}]", r) for i, r in enumerate(self.roles.rollout)]
        for where, role in named:
            if role.pool not in self.pools:
                raise ValueError(f"roles.{where}.pool {role.pool!r} is not a pool; pools: {', '.join(self.pools)}")
        pools = [r.pool for r in self.roles.rollout]
        dup = sorted({p for p in pools if pools.count(p) > 1})
        if dup:
            raise ValueError(f"roles.rollout lists pool(s) {', '.join(dup)} twice; give one entry per pool")
        return self

    def rollout_role(self, pool: str) -> RoleSpec:
        for role in self.roles.rollout:
            if role.pool == pool:
                return role
        raise KeyError(pool)


class TaskPlacement(FrozenModel):
    name: str
    rollout_pool: str


def check_task_pools(cluster: ClusterSpec, tasks: list[TaskPlacement]) -> None:
    """Every task must roll out on a pool that has a rollout role; names must be unique."""
    rollout_pools = {r.pool for r in cluster.roles.rollout}
    seen: set[str] = set()
    for i, task in enumerate(tasks):
        if task.name in seen:
            raise ValueError(f"tasks[{i}]: task {task.name!r} is placed twice")
        seen.add(task.name)
        if task.rollout_pool not in rollout_pools:
            raise ValueError(
                f"tasks[{i}] ({task.name}): rollout_pool {task.rollout_pool!r} has no rollout role; "
                f"rollout pools: {', '.join(sorted(rollout_pools))}"
            )


class PlacementFragment(FrozenModel):
    cluster: ClusterSpec
    tasks: list[TaskPlacement] = Field(min_length=1)

    @model_validator(mode="after")
    def _tasks_use_rollout_pools(self) -> PlacementFragment:
        check_task_pools(self.cluster, self.tasks)
        return self

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with exactly the contract's keys (``units`` only where it is not 1)."""
        data = self.model_dump(mode="json")
        roles = data["cluster"]["roles"]
        for entry in [roles["train"], roles["env"], roles["reward"], *roles["rollout"]]:
            if entry["units"] == 1:
                del entry["units"]
        return data

    def write_yaml(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(self.as_dict(), sort_keys=False))
        tmp.replace(path)
        return path
