"""``rollarc simulate --from-run RUN_DIR``: affinity vs random routing on a heterogeneous cluster,
for the task mix a real run measured (``--from-workload W.yaml``: for a workload file's task mix).

1. The workload is the run's own: per-task token shapes, turns, env latency and reward time from
   ``task_profiles.json`` (distributions with the measured mean and quantiles), the task weights, and
   the run's B, G and k (``--groups-per-step`` may set a larger B for a large cluster).
2. The model and the software efficiencies come from a shipped workload file (default
   ``configs/cluster/workloads/moe30b_agentic.yaml``): the run's tiny model is not what a
   128-GPU cluster trains.
3. The planner places that workload on the cluster (default ``configs/cluster/mid_128.yaml``): a
   device kind and count per role, and each task's rollout pool, by hardware affinity.
4. The simulator runs that placement twice with the same seed: (a) **affinity** routing, each task's
   trajectories on its planned pool; (b) **random** routing, each trajectory on any engine of any
   rollout pool (the runtime's routing with no preferred pool: sticky, least loaded, as in (a), but
   task-oblivious). Same devices, same engines; only the routing differs.

The speed-up is ``step_time(random) / step_time(affinity)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollarc.cluster.inventory import load_inventory
from rollarc.cluster.planner import Planner, task_class
from rollarc.cluster.profile_workload import uncached_share, workload_from_profiles
from rollarc.cluster.workload import Workload, load_workload
from rollarc.config.io import ConfigError
from rollarc.sim.plan_scenario import plan_scenario
from rollarc.sim.result import SimResult
from rollarc.sim.run_dir import read_task_profiles
from rollarc.sim.setup import build_setup
from rollarc.sim.simulator import simulate

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CLUSTER = REPO / "configs/cluster/mid_128.yaml"
DEFAULT_MODEL = REPO / "configs/cluster/workloads/moe30b_agentic.yaml"


def run_workload(run_dir: str | Path, model_workload: str | Path, groups_per_step: int | None = None) -> Workload:
    """The run's measured task mix on the model and efficiencies of ``model_workload``."""
    template = load_workload(model_workload)
    profiles = read_task_profiles(run_dir)
    return workload_from_profiles(
        profiles, template.model, template.efficiency, groups_per_step, where=str(Path(run_dir) / "task_profiles.json")
    )


def task_rows(workload: Workload, pools: dict[str, str]) -> list[dict[str, Any]]:
    """Each task's shape as the simulation uses it (means), its class and its planned pool."""
    rows = []
    for t in workload.tasks:
        rows.append(
            {
                "task": t.name,
                "share": t.share,
                "turns": t.turns.mean(),
                "prompt_tokens_per_turn": t.prompt_tokens.mean(),
                "uncached_share": 1.0,
                "new_tokens_per_turn": t.response_tokens.mean(),
                "env_step_ms": 1e3 * t.env_latency_s.mean(),
                "class": task_class(workload, t.name),
                "pool": pools[t.name],
            }
        )
    return rows


def compare_routing(
    run_dir: str | Path,
    cluster: str | Path = DEFAULT_CLUSTER,
    model_workload: str | Path = DEFAULT_MODEL,
    steps: int = 20,
    seed: int = 0,
    groups_per_step: int | None = None,
) -> dict[str, Any]:
    """Plan the run's workload on ``cluster``, simulate affinity and random routing; return both and the ratio."""
    run_dir = Path(run_dir)
    workload = run_workload(run_dir, model_workload, groups_per_step)
    profiles = read_task_profiles(run_dir)
    report = compare_workload_routing(
        workload, cluster, steps, seed, source=str(run_dir / "task_profiles.json"), label=run_dir.name
    )
    for row in report["tasks"]:
        measured = profiles.tasks[row["task"]]
        row["prompt_tokens_per_turn"] = measured.prompt_tokens_per_turn.mean
        row["uncached_share"] = uncached_share(measured)
    return {"run_dir": str(run_dir), "model_workload": str(model_workload), **report}


def compare_workload_routing(
    workload: Workload,
    cluster: str | Path,
    steps: int = 20,
    seed: int = 0,
    source: str = "workload",
    label: str = "workload",
) -> dict[str, Any]:
    """Plan ``workload`` on ``cluster`` and simulate the plan with affinity and with random routing."""
    cluster = Path(cluster)
    inventory, catalogue = load_inventory(cluster)
    fragment = Planner(inventory, catalogue, workload).plan().fragment(catalogue, workload)
    catalogue_path = str((cluster.parent / inventory.catalogue).resolve())
    results: dict[str, SimResult] = {}
    for routing in ("affinity", "random"):
        loaded = plan_scenario(
            fragment,
            inventory,
            catalogue,
            catalogue_path,
            workload,
            source,
            steps,
            name=f"{label}:{routing}",
            routing=routing,
            seed=seed,
        )
        try:
            results[routing] = simulate(build_setup(loaded))
        except ConfigError as err:
            raise ConfigError(f"{source} on {cluster}: {err}") from None
    affinity, random = results["affinity"], results["random"]
    pools = {t.name: t.rollout_pool for t in fragment.tasks}
    return {
        "source": source,
        "cluster": str(cluster),
        "model": workload.model.name,
        "batch": workload.batch.model_dump(),
        "tasks": task_rows(workload, pools),
        "placement": fragment.as_dict(),
        "rollout_pools": len(fragment.cluster.roles.rollout),
        "affinity": affinity.as_dict(),
        "random": random.as_dict(),
        "speedup": random.step_time_s / affinity.step_time_s,
        "throughput_ratio": affinity.trajectories_per_s / random.trajectories_per_s,
    }
