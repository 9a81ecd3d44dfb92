"""A simulation scenario for a plan: the planner's placement, run as the simulator's reference check.

Used by ``rollarc plan --simulate`` and ``rollarc simulate --from-run``. Model rewards go to
serverless instances when the inventory offers them, else to the plan's dedicated replicas; the
mode follows the workload's staleness bound (``k = 0`` is synchronous).
"""

from __future__ import annotations

from typing import Literal

from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.fragment import PlacementFragment
from rollarc.cluster.inventory import Inventory
from rollarc.cluster.workload import Workload
from rollarc.sim.scenario import LoadedScenario, RewardService, Scenario


def plan_scenario(
    fragment: PlacementFragment,
    inventory: Inventory,
    catalogue: Catalogue,
    catalogue_path: str,
    workload: Workload,
    workload_source: str,
    steps: int,
    name: str = "plan",
    routing: Literal["affinity", "random"] = "affinity",
    seed: int = 0,
) -> LoadedScenario:
    offer = inventory.serverless
    if offer is not None and offer.enabled:
        reward = RewardService(
            mode="serverless",
            device=offer.device,
            cold_start_s=offer.cold_start_s,
            keep_alive_s=offer.keep_alive_s,
            max_instances=offer.max_instances,
            price_markup=offer.price_markup,
        )
    else:
        reward = RewardService(mode="dedicated")
    k = workload.batch.max_staleness
    scenario = Scenario(
        name=name,
        catalogue=catalogue_path,
        workload=workload_source,
        steps=steps,
        seed=seed,
        mode="sync" if k == 0 else "async",
        max_staleness=k or None,
        routing=routing,
        cluster=fragment.cluster,
        tasks=fragment.tasks,
        reward=reward,
    )
    return LoadedScenario(scenario=scenario, catalogue=catalogue, workload=workload, max_staleness=k, source=name)
