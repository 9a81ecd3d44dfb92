"""The ``cluster:`` section of the training config: Ray address, resource pools and the roles placed on them.

Its own module (below the training config, ``rollarc.config.run``, and ``rollarc.rewards``) so that the reward section can check its
placement against a typed ``ClusterConfig`` without importing the whole training config.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from rollarc.config.io import FrozenModel


class PoolConfig(FrozenModel):
    """A resource pool: a Ray custom resource with ``count`` units that roles reserve."""

    count: int = Field(..., ge=0, description="units of the pool (the Ray resource's amount)")
    kind: str = Field(
        "cpu",
        description="hardware label from the cluster catalogue (cpu, h800, h20, ...); written by "
        "`rollarc plan --emit-config`, placement uses only the resource",
    )
    resource: str | None = Field(None, description="Ray resource name; default pool_<name>")


class RoleConfig(FrozenModel):
    """Where one role's replicas run and what each reserves."""

    pool: str = Field(..., description="the declared pool the replicas are placed on")
    replicas: int = Field(
        1,
        ge=0,
        description="replicas of the role (train: one FSDP2 rank each; env: at least 1; reward: "
        "the fixed pool of `reward.kind: dedicated`)",
    )
    units: float = Field(1.0, ge=0.0, description="pool units each replica reserves")
    threads: int = Field(1, ge=1, description="torch threads pinned in each replica")


class RolesConfig(FrozenModel):
    """Which pool each role runs on, and how many replicas."""

    train: RoleConfig = Field(
        RoleConfig(pool="compute"),
        description="the TrainWorker; with replicas > 1, one FSDP2 rank per replica (docs/fsdp.md)",
    )
    env: RoleConfig = Field(RoleConfig(pool="cpu"), description="EnvWorkers: environments and agent loops")
    rollout: list[RoleConfig] = Field(
        [RoleConfig(pool="compute")],
        description="RolloutWorkers (engine replicas), one entry per rollout pool; a single mapping is accepted too",
    )
    reward: RoleConfig = Field(
        RoleConfig(pool="cpu", replicas=0),
        description="model-based reward replicas: the fixed pool (dedicated) or the pool a serverless reward scales in",
    )

    @field_validator("rollout", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value


class CallDeadlines(FrozenModel):
    """How long the driver waits on an actor before it counts as hung (``rollarc.rayproc.deadline``).

    A dead actor is noticed at once; these bound the wait on one that is alive but does not answer."""

    start_timeout_s: float = Field(
        1800.0,
        gt=0.0,
        description="deadline of an actor's start: its first answer waits for its constructor, the model it loads "
        "and, on resume, the checkpoint; a start that takes longer stops the run naming the actor",
    )
    call_timeout_s: float = Field(
        300.0,
        gt=0.0,
        description="deadline of a control call to an actor (ping, stats, spans, adding or removing a replica, "
        "a router or spot-queue call); an actor that does not answer in time stops the run naming it and the call",
    )
    train_timeout_s: float = Field(
        3600.0,
        gt=0.0,
        description="deadline of a long call: a training step, publishing and syncing its weights, a checkpoint "
        "save or load, a held-out evaluation batch; raise it for a big model whose step takes longer",
    )


class ClusterConfig(CallDeadlines):
    """The Ray cluster to start or join, its resource pools, and where each role runs."""

    address: str | None = Field(
        None,
        description="join this Ray cluster instead of starting a local one (`rollarc train --address` overrides it); "
        "null always starts a new local cluster, even beside one that `ray start` left on this machine",
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local Ray cluster (null: every core)")
    cores: list[int] | None = Field(
        None,
        min_length=1,
        description="pin the driver, and so the local Ray cluster it starts (every role's process inherits it), to "
        "these CPU cores (Linux); with harvest.cores on others, one machine emulates a serving deployment on its own "
        "hardware (docs/rose.md#pinned-cores); restored when Ray stops; null: every core",
    )
    include_dashboard: bool = Field(False, description="start the Ray dashboard with the local cluster")
    dashboard_host: str = Field("127.0.0.1", description="interface the local Ray dashboard listens on")
    pools: dict[str, PoolConfig] = Field(
        {"compute": PoolConfig(count=2, kind="cpu"), "cpu": PoolConfig(count=4)}, description="resource pools by name"
    )
    roles: RolesConfig = Field(RolesConfig(), description="the pool and replicas of each role")

    @model_validator(mode="after")
    def _roles_use_declared_pools(self) -> ClusterConfig:
        roles = self.roles
        named = [("train", roles.train), ("env", roles.env), ("reward", roles.reward)]
        named += [(f"rollout[{i}]", r) for i, r in enumerate(roles.rollout)]
        need: dict[str, float] = {}
        for role, spec in named:
            if spec.pool not in self.pools:
                raise ValueError(
                    f"cluster.roles.{role}.pool {spec.pool!r} is not a declared pool "
                    f"(declared: {', '.join(self.pools)})"
                )
            need[spec.pool] = need.get(spec.pool, 0.0) + spec.replicas * spec.units
        for pool, units in need.items():
            if units > self.pools[pool].count:
                raise ValueError(
                    f"cluster.pools.{pool}: roles need {units:g} units but count is {self.pools[pool].count}"
                )
        if sum(r.replicas for r in roles.rollout) < 1:
            raise ValueError("cluster.roles.rollout needs at least one replica")
        if roles.train.replicas < 1:
            raise ValueError("cluster.roles.train.replicas must be at least 1 (each replica is one FSDP rank)")
        if roles.env.replicas < 1:
            raise ValueError("cluster.roles.env.replicas must be at least 1")
        if self.cores is not None and self.address is not None:
            raise ValueError("cluster.cores pins the local cluster rollarc starts: drop it to join cluster.address")
        return self
