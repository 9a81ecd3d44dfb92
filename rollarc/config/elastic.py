"""The ``elastic:`` list: rollout replicas added or removed at given steps, and the replica counts it implies."""

from __future__ import annotations

from pydantic import Field, model_validator

from rollarc.config.cluster import ClusterConfig
from rollarc.config.io import FrozenModel


class ElasticChange(FrozenModel):
    """One change of the rollout membership, made right after a training step's weights reach every replica."""

    at_step: int = Field(
        ..., ge=1, description="apply once this training step (policy version) is synced; must be below train.steps"
    )
    pool: str | None = Field(
        None,
        description="the rollout pool whose replicas change; its first `cluster.roles.rollout` entry gives "
        "the units and threads of an added replica (null: the first rollout entry's pool)",
    )
    add: int = Field(
        0,
        ge=0,
        description="replicas to start; each fetches a full copy of the current weights before it serves, "
        "then takes the same deltas as the others",
    )
    remove: int = Field(
        0,
        ge=0,
        description="replicas of the pool to stop, newest first: each stops taking new turns, its in-flight "
        "turns finish (drain), and what is still running after `drain_timeout_s` is aborted and resumed "
        "from its partial output on the remaining replicas",
    )
    drain_timeout_s: float = Field(
        30.0, ge=0.0, description="seconds a removed replica's in-flight turns may take to finish before abort"
    )

    @model_validator(mode="after")
    def _one_change(self) -> ElasticChange:
        if (self.add > 0) == (self.remove > 0):
            raise ValueError(f"elastic change at_step {self.at_step}: set exactly one of add or remove (> 0)")
        return self


def elastic_pool(change: ElasticChange, cluster: ClusterConfig) -> str:
    return change.pool if change.pool is not None else cluster.roles.rollout[0].pool


def rollout_replicas_at(elastic: list[ElasticChange], cluster: ClusterConfig, version: int) -> dict[str, int]:
    """Rollout replicas per pool once the changes up to ``version`` are applied (a resumed run starts so)."""
    count: dict[str, int] = {}
    for role in cluster.roles.rollout:
        count[role.pool] = count.get(role.pool, 0) + role.replicas
    for change in elastic:
        if change.at_step <= version:
            pool = elastic_pool(change, cluster)
            count[pool] = count.get(pool, 0) + change.add - change.remove
    return count


def rollout_entry_replicas(elastic: list[ElasticChange], cluster: ClusterConfig, version: int) -> list[int]:
    """Replicas of each ``cluster.roles.rollout`` entry at ``version``: a pool's first entry takes the changes."""
    extra = rollout_replicas_at(elastic, cluster, version)
    for role in cluster.roles.rollout:
        extra[role.pool] -= role.replicas
    counts = []
    for role in cluster.roles.rollout:
        count = max(0, role.replicas + extra[role.pool])  # removals beyond the first entry go on to the next
        extra[role.pool] -= count - role.replicas
        counts.append(count)
    return counts


def elastic_problems(elastic: list[ElasticChange], cluster: ClusterConfig, steps: int) -> list[str]:
    """What would make the schedule fail mid-run, found at load time: unknown pools, too few or too many replicas."""
    problems = []
    rollout_pools = [r.pool for r in cluster.roles.rollout]
    for i, change in enumerate(elastic):
        if change.pool is not None and change.pool not in rollout_pools:
            problems.append(
                f"elastic[{i}].pool {change.pool!r} has no cluster.roles.rollout entry "
                f"(rollout pools: {', '.join(sorted(set(rollout_pools)))})"
            )
        if change.at_step >= steps:
            problems.append(
                f"elastic[{i}].at_step {change.at_step} is never reached before the run ends "
                f"(train.steps is {steps}; use at_step < {steps})"
            )
    if problems:
        return problems
    used = {pool: 0.0 for pool in cluster.pools}
    for role in [cluster.roles.train, cluster.roles.env, cluster.roles.reward]:
        used[role.pool] += role.replicas * role.units
    units = {}
    for role in reversed(cluster.roles.rollout):
        units[role.pool] = role.units  # the pool's first entry gives an added replica's units
        used[role.pool] += role.replicas * role.units
    for step in sorted({c.at_step for c in elastic}):
        before = rollout_replicas_at(elastic, cluster, step - 1)
        after = rollout_replicas_at(elastic, cluster, step)
        for pool, n in after.items():
            if n < 0:
                problems.append(f"elastic: at_step {step} removes more {pool} rollout replicas than run there")
            used[pool] += (n - before.get(pool, 0)) * units[pool]
            if used[pool] > cluster.pools[pool].count:
                problems.append(
                    f"elastic: at_step {step} the roles need {used[pool]:g} units of pool {pool} "
                    f"but cluster.pools.{pool}.count is {cluster.pools[pool].count}"
                )
        if sum(after.values()) < 1:
            problems.append(f"elastic: at_step {step} would leave no rollout replica (at least 1 must remain)")
    return problems
