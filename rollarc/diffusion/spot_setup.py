"""What a t2i run's config says about its spot fleet: the spot pool's resource and slot count, the preemption schedule,
the local Ray cluster that stands for the spot nodes on one machine, and the cost of the run's node-seconds."""

from __future__ import annotations

from ray.cluster_utils import Cluster

from rollarc.cluster.catalogue import load_catalogue
from rollarc.config.io import ConfigError, read_yaml
from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.spot_queue import HEAD_RESOURCE
from rollarc.rayproc.placement import CATALOGUE, pool_resource
from rollarc.spotlight.preemption import Preemption, at_rate, from_trace


def spot_slots(cfg: T2IConfig) -> tuple[str, int]:
    """The spot pool's Ray resource and its node count (one explorer per node)."""
    pool = cfg.cluster.roles.explorer.pool
    return pool_resource(pool, cfg.cluster.pools[pool]), cfg.cluster.pools[pool].count


def preemption_schedule(cfg: T2IConfig) -> list[Preemption]:
    """The trace named by ``spot.trace``, else preemptions drawn at ``spot.rate_per_hour`` (seeded by ``seed``)."""
    sc, slots = cfg.spot, spot_slots(cfg)[1]
    if sc.trace is None:
        return at_rate(sc.rate_per_hour, slots, sc.horizon_s, sc.notice_s, sc.replacement_s, cfg.seed)
    rows = read_yaml(sc.trace).get("preemptions")
    if not isinstance(rows, list):
        raise ConfigError(f"spot.trace {sc.trace}: needs a 'preemptions:' list of {{at_s, slot, notice_s}}")
    try:
        return from_trace(rows, slots)
    except ValueError as err:
        raise ConfigError(f"spot.trace {sc.trace}: {err}") from err


def start_local_cluster(cfg: T2IConfig) -> Cluster:
    """A head node with every non-spot pool (and the queue's resource); spot nodes are added by the fleet."""
    spot_resource = spot_slots(cfg)[0]
    resources = {pool_resource(n, p): float(p.count) for n, p in cfg.cluster.pools.items()}
    resources.pop(spot_resource)
    resources[HEAD_RESOURCE] = 1.0
    return Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": cfg.cluster.num_cpus or 1, "resources": resources, "include_dashboard": False},
    )


def cost_summary(cfg: T2IConfig, rl_wall_s: float, spot_node_seconds: dict[str, float]) -> dict[str, float]:
    """USD of the run: trainer and sampler on demand for the RL time; explorers at the spot price per node-hour.

    ``explorers_on_demand_usd`` prices the same explorer slots on demand for the whole RL time, which is
    what exploration costs without spot capacity.
    """
    cat = load_catalogue(CATALOGUE)
    pools, roles = cfg.cluster.pools, cfg.cluster.roles
    hours = rl_wall_s / 3600.0
    fixed = sum(
        getattr(roles, r).units * cat.price_per_hour(pools[getattr(roles, r).pool].kind) for r in ("trainer", "sampler")
    )
    spot_pool = pools[roles.explorer.pool]
    spot_hours = sum(spot_node_seconds.values()) / 3600.0
    return {
        "on_demand_roles_usd": fixed * hours,
        "explorers_spot_usd": spot_hours * cat.price_per_hour(spot_pool.kind, spot=True),
        "explorers_on_demand_usd": spot_pool.count * hours * cat.price_per_hour(spot_pool.kind),
        "spot_node_hours": spot_hours,
    }
