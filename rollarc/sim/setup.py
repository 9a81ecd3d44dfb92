"""What the simulator runs: resolved per-task samplers, engine/train/reward costs and prices.

A :class:`SimSetup` is built either from a scenario (roofline costs from the catalogue, see
:func:`build_setup`) or by calibration (costs fitted from a real run). The simulator only sees this
object, so both paths run the same simulation code.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollarc.cluster import roofline
from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.distributions import Distribution
from rollarc.cluster.engine_cost import (
    EngineCost,
    RooflineEngine,
    RooflineReward,
    RooflineTrain,
    ServiceCost,
    TrainCost,
)
from rollarc.cluster.fragment import ClusterSpec
from rollarc.config.io import ConfigError
from rollarc.policy.scheduler import DEFAULT_MAX_OVERTAKE, DynamicSampling
from rollarc.sim.scenario import LoadedScenario


@dataclass(frozen=True)
class TaskSetup:
    name: str
    groups_per_step: int
    rollout_pool: str
    first_prompt: Distribution
    prompt: Distribution
    response: Distribution
    turns: Distribution
    env_latency: Distribution
    reward_latency: Distribution
    reward_service: ServiceCost | None  # None: no model-based reward


@dataclass(frozen=True)
class RolloutPoolSetup:
    name: str
    engines: int
    cost: EngineCost


@dataclass(frozen=True)
class PoolBilling:
    name: str
    kind: str
    count: int
    price_per_hour: float  # of one device or node, spot applied


@dataclass(frozen=True)
class RewardSetup:
    mode: str  # "dedicated" | "serverless"
    pool: str
    replicas: int
    cold_start_s: float = 0.0
    keep_alive_s: float = 0.0
    max_instances: int = 0
    instance_price_per_hour: float = 0.0


@dataclass(frozen=True)
class SimSetup:
    name: str
    tasks: list[TaskSetup]
    rollout: list[RolloutPoolSetup]
    env_pool: str
    env_slots: int
    train_pool: str
    train: TrainCost
    reward: RewardSetup
    sync_s: float
    swap_s: float
    max_staleness: int
    groups_per_step: int
    group_size: int
    steps: int
    seed: int
    pools: dict[str, PoolBilling]
    colocated: bool = False
    switch_s: float = 0.0
    routing: str = "affinity"  # "affinity" | "random" (see Scenario.routing)
    max_overtake: int = DEFAULT_MAX_OVERTAKE  # as the runtime's async.max_overtake (batches in admission order)
    dynamic_sampling: DynamicSampling | None = None  # as the runtime's train.dynamic_sampling (replayed groups only)

    @property
    def mode(self) -> str:
        return "sync" if self.max_staleness == 0 else f"async({self.max_staleness})"

    @property
    def price_per_hour(self) -> float:
        """Reserved capacity only; serverless usage is billed on top by the second."""
        return sum(p.count * p.price_per_hour for p in self.pools.values())


def build_setup(loaded: LoadedScenario) -> SimSetup:
    """Resolve a scenario into costs; every mismatch is a ConfigError naming the scenario key."""
    sc, cat, wl = loaded.scenario, loaded.catalogue, loaded.workload
    cluster = sc.cluster
    eff = wl.efficiency
    _check_kinds(cluster, cat, sc.placement == "colocated")
    roles = cluster.roles
    train_kind = cluster.pools[roles.train.pool].kind
    train_gpu = cat.gpu(train_kind)
    need = roofline.min_train_devices(train_gpu, wl.model, eff.train_bytes_per_param, eff.gpu_memory_utilization)
    if roles.train.devices < need:
        raise ConfigError(
            f"{loaded.source}: cluster.roles.train has {roles.train.devices} {train_kind} device(s); training "
            f"{wl.model.name} needs at least {need} ({eff.train_bytes_per_param:g} bytes/param)"
        )
    train = RooflineTrain(train_gpu, wl.model, roles.train.devices, eff)

    placement = {t.name: t.rollout_pool for t in sc.tasks}
    rollout: list[RolloutPoolSetup] = []
    sync_s = swap_s = 0.0
    for role in roles.rollout:
        kind = cluster.pools[role.pool].kind
        gpu = cat.gpu(kind)
        try:
            cost = RooflineEngine(gpu, wl.model, role.units, eff)
        except ValueError as err:
            raise ConfigError(f"{loaded.source}: cluster.roles.rollout[{role.pool}]: {err}") from None
        for task in wl.tasks:
            lands_here = placement[task.name] == role.pool or sc.routing == "random"
            if lands_here and task.max_context_tokens() > cost.kv_capacity_tokens:
                raise ConfigError(
                    f"{loaded.source}: task {task.name} can reach {task.max_context_tokens():.0f} tokens of context but one "
                    f"{kind} engine of {role.units} unit(s) holds {cost.kv_capacity_tokens:.0f}; cap its distributions "
                    f"(max:) or raise units"
                )
        if role.replicas <= 0:
            raise ConfigError(f"{loaded.source}: cluster.roles.rollout[{role.pool}].replicas must be > 0")
        rollout.append(RolloutPoolSetup(role.pool, role.replicas, cost))
        if sc.placement == "colocated":
            link = gpu.nvlink_bytes_per_s
        else:
            link = min(gpu.network_bytes_per_s, train_gpu.network_bytes_per_s)
        sync_s = max(sync_s, roofline.weight_sync_time(wl.model.weight_bytes, link, role.units, eff.sync_latency_s))
        swap_s = max(swap_s, roofline.engine_swap_time(gpu, wl.model.weight_bytes, role.units))

    reward = _reward_setup(loaded)
    reward_gpu = cat.gpu(sc.reward.device or cluster.pools[roles.reward.pool].kind)
    groups = wl.groups_per_task()
    tasks = [
        TaskSetup(
            name=t.name,
            groups_per_step=groups[t.name],
            rollout_pool=placement[t.name],
            first_prompt=t.first_prompt,
            prompt=t.prompt_tokens,
            response=t.response_tokens,
            turns=t.turns,
            env_latency=t.env_latency_s,
            reward_latency=t.reward.latency_s,
            reward_service=RooflineReward(reward_gpu, t.reward.model_params, eff.prefill_mfu)
            if t.reward.model_params and t.reward.kind == "model"
            else None,
        )
        for t in wl.tasks
    ]
    if any(t.reward_service for t in tasks) and reward.mode == "dedicated" and reward.replicas == 0:
        raise ConfigError(
            f"{loaded.source}: a task has a model reward but reward.mode is 'dedicated' with cluster.roles.reward.replicas 0"
        )
    env_role = roles.env
    env_slots = env_role.devices * cat.cpu(cluster.pools[env_role.pool].kind).cores
    pools = {
        name: PoolBilling(name, pool.kind, pool.count, cat.price_per_hour(pool.kind, spot=name in sc.spot_pools))
        for name, pool in cluster.pools.items()
    }
    return SimSetup(
        name=sc.name,
        tasks=tasks,
        rollout=rollout,
        env_pool=env_role.pool,
        env_slots=env_slots,
        train_pool=roles.train.pool,
        train=train,
        reward=reward,
        sync_s=sync_s,
        swap_s=swap_s,
        max_staleness=loaded.max_staleness,
        groups_per_step=wl.batch.groups_per_step,
        group_size=wl.batch.group_size,
        steps=sc.steps,
        seed=sc.seed,
        pools=pools,
        colocated=sc.placement == "colocated",
        switch_s=sc.colocate_switch_s,
        routing=sc.routing,
    )


def _reward_setup(loaded: LoadedScenario) -> RewardSetup:
    sc, cat = loaded.scenario, loaded.catalogue
    role = sc.cluster.roles.reward
    if sc.reward.mode == "dedicated":
        return RewardSetup("dedicated", role.pool, role.replicas)
    kind = sc.reward.device or sc.cluster.pools[role.pool].kind
    return RewardSetup(
        "serverless",
        role.pool,
        0,
        cold_start_s=sc.reward.cold_start_s,
        keep_alive_s=sc.reward.keep_alive_s,
        max_instances=sc.reward.max_instances,
        instance_price_per_hour=cat.price_per_hour(kind) * sc.reward.price_markup,
    )


def _check_kinds(cluster: ClusterSpec, cat: Catalogue, colocated: bool) -> None:
    roles = cluster.roles
    for pool in cluster.pools.values():
        cat.is_gpu(pool.kind)  # raises for an unknown kind, naming the catalogue's
    if cat.is_gpu(cluster.pools[roles.env.pool].kind):
        raise ConfigError(f"cluster.roles.env.pool {roles.env.pool!r} is a GPU pool; environments run on a CPU pool")
    for where, role in [("train", roles.train), *[(f"rollout[{r.pool}]", r) for r in roles.rollout]]:
        if not cat.is_gpu(cluster.pools[role.pool].kind):
            raise ConfigError(f"cluster.roles.{where}.pool {role.pool!r} is a CPU pool; it needs GPUs")
    if colocated and any(r.pool != roles.train.pool for r in roles.rollout):
        raise ConfigError("placement 'colocated': every rollout role must use the train pool")
    used: dict[str, int] = {}
    rollout_devices = {r.pool: r.devices for r in roles.rollout}
    for name in cluster.pools:
        train = roles.train.devices if roles.train.pool == name else 0
        roll = rollout_devices.get(name, 0)
        shared = max(train, roll) if colocated else train + roll
        reward = roles.reward.devices if roles.reward.pool == name else 0
        env = roles.env.devices if roles.env.pool == name else 0
        used[name] = shared + reward + env
    for name, n in used.items():
        if n > cluster.pools[name].count:
            raise ConfigError(
                f"cluster.pools.{name}: roles use {n} units but the pool has count {cluster.pools[name].count}"
            )
