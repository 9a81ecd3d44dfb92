"""The ``cluster:`` section of the training config: Ray address, resource pools and the roles placed on them.

Its own module (below ``rollarc.config`` and ``rollarc.rewards``) so that the reward section can check its
placement against a typed ``ClusterConfig`` without importing the whole training config.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from rollarc.configio import FrozenModel


class PoolConfig(FrozenModel):
    count: int = Field(..., ge=0)
    kind: str = "cpu"
    resource: str | None = Field(None, description="Ray resource name; default pool_<name>")


class RoleConfig(FrozenModel):
    pool: str
    replicas: int = Field(1, ge=0)
    units: float = Field(1.0, ge=0.0, description="pool units each replica reserves")
    threads: int = Field(1, ge=1, description="torch threads pinned in each replica")


class RolesConfig(FrozenModel):
    train: RoleConfig = RoleConfig(pool="compute")
    env: RoleConfig = RoleConfig(pool="cpu")
    rollout: list[RoleConfig] = [RoleConfig(pool="compute")]
    reward: RoleConfig = RoleConfig(pool="cpu", replicas=0)

    @field_validator("rollout", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value


class ClusterConfig(FrozenModel):
    address: str | None = None
    num_cpus: int | None = Field(None, ge=1)
    include_dashboard: bool = False
    dashboard_host: str = "127.0.0.1"
    pools: dict[str, PoolConfig] = {"compute": PoolConfig(count=2, kind="cpu"), "cpu": PoolConfig(count=4)}
    roles: RolesConfig = RolesConfig()

    @model_validator(mode="after")
    def _roles_use_declared_pools(self) -> ClusterConfig:
        roles = self.roles
        named = [("train", roles.train), ("env", roles.env), ("reward", roles.reward)]
        named += [(f"rollout[{i}]", r) for i, r in enumerate(roles.rollout)]
        need: dict[str, float] = {}
        for role, spec in named:
            if spec.pool not in self.pools:
                raise ValueError(f"cluster.roles.{role}.pool {spec.pool!r} is not a declared pool "
                                 f"(declared: {', '.join(self.pools)})")
            need[spec.pool] = need.get(spec.pool, 0.0) + spec.replicas * spec.units
        for pool, units in need.items():
            if units > self.pools[pool].count:
                raise ValueError(f"cluster.pools.{pool}: roles need {units:g} units but count is "
                                 f"{self.pools[pool].count}")
        if sum(r.replicas for r in roles.rollout) < 1:
            raise ValueError("cluster.roles.rollout needs at least one replica")
        if roles.train.replicas != 1:
            raise ValueError("cluster.roles.train.replicas must be 1 (data-parallel training is not built yet)")
        if roles.env.replicas < 1:
            raise ValueError("cluster.roles.env.replicas must be at least 1")
        return self
