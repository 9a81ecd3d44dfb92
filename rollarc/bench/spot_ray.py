"""Pull vs push *measured on Ray*: the same spot workers, the same preemption trace, wall-clock jobs per second.

Each mode gets a fresh local ``ray.cluster_utils.Cluster`` (started by ``start_cluster``, as a spot run's
is) with one Ray node per spot slot, the same
``SpotExplorer`` actors (the DiT of ``--config``, one torch thread each) and the same injector schedule
(``spot.trace`` of the config, or its rate), counted from the moment the jobs are handed out; the clock
starts after every worker has loaded its DiT, so start-up is not timed. Replacements join
``spot.replacement_s`` after a loss, as in training.

- **pull**: ``SpotFleet``'s queue; a notice makes the busy worker commit its latent, a loss without one
  leaves the lease to expire (``spot.lease_s``); any live worker takes any job.
- **push**: ``push_fleet.push_all``: job ``i`` on slot ``i mod slots`` fixed up front; a lost job
  restarts from step 0 on the slot's replacement; a notice is ignored.

Both runs score the same jobs (prompt, seeds, steps, weights), so their rewards must agree; the result
says whether they did.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray

from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.model import build_policy
from rollarc.diffusion.push_fleet import push_all
from rollarc.diffusion.spot_fleet import HEAD_RESOURCE, SpotFleet, preemption_schedule, spot_slots
from rollarc.diffusion.tasks.registry import make_task, vocabulary
from rollarc.runtime.ray_cluster import RayStart, local_nodes, start_cluster, stop_ray
from rollarc.spotlight.job_queue import JobSpec


def _jobs(cfg: T2IConfig, cache: Path, count: int, steps: int) -> list[JobSpec]:
    prompts = [p for name in cfg.tasks for p in make_task(name, cache).prompts()]
    seeds = cfg.explore.candidates
    return [
        JobSpec(i, prompts[i % len(prompts)], tuple(range(i * seeds, (i + 1) * seeds)), 0, steps) for i in range(count)
    ]


def _run(mode: str, cfg: T2IConfig, policy_dir: Path, cache: Path, jobs: list[JobSpec]) -> dict[str, Any]:
    spot_resource, slots = spot_slots(cfg)
    fleet = None
    try:
        # started as `rollarc train` starts a spot run's cluster: a head now, the spot nodes added by the fleet
        spot_pool = cfg.cluster.roles.explorer.pool
        spec = RayStart(
            pools={spot_pool: cfg.cluster.pools[spot_pool]},
            num_cpus=1,
            joining_pools=(spot_pool,),
            head_resources={HEAD_RESOURCE: 1.0},
        )
        start_cluster(spec, device="cpu")
        cluster = local_nodes()
        sc = cfg.spot
        fleet = SpotFleet(
            cluster,
            spot_resource,
            slots,
            preemption_schedule(cfg),
            sc.replacement_s,
            sc.lease_s,
            (str(policy_dir), cfg.tasks, str(cache), 1),
            0,
            cfg.train.noise_level,
            pull=False,
            heartbeat_every=sc.heartbeat_every,
        )
        with fleet.lock:
            workers = [n.worker for n in fleet.nodes.values()]
        ray.get([w.ready.remote() for w in workers])
        t0 = time.perf_counter()
        if mode == "pull":
            fleet.start_pulling()
            ids = fleet.launch([j.prompt for j in jobs], [list(j.seeds) for j in jobs], jobs[0].steps, 0)
            rewards = fleet.wait(ids)["rewards"]
            seconds = time.perf_counter() - t0
            stats = fleet.stats()
            out = {
                "completed": stats["completed"],
                "lost_jobs": stats["lost_jobs"],
                "duplicate_jobs": stats["duplicate_jobs"],
                "redone_jobs": stats["requeued_on_expiry"],
                "committed_on_notice": stats["committed_on_notice"],
                "lost_steps": stats["lost_steps"],
            }
        else:
            fleet.start_schedule()
            outcome = push_all(fleet, jobs)
            seconds = time.perf_counter() - t0
            rewards = [outcome.results[j.job_id]["rewards"] for j in jobs]
            out = {
                "completed": len(outcome.results),
                "lost_jobs": len(jobs) - len(outcome.results),
                "duplicate_jobs": outcome.completions - len(outcome.results),
                "redone_jobs": outcome.restarted,
            }
        fleet.close()
        out.update(
            seconds=seconds,
            jobs_per_s=len(jobs) / seconds,
            preemptions=fleet.stats()["preemptions"],
            events=fleet.log.events,
            rewards=rewards,
        )
        return out
    finally:
        if fleet is not None:
            fleet.close()
        # The next mode starts a cluster at once: Ray gives a new raylet a fixed 30 s to register, which a
        # loaded machine misses while this session's daemons are still exiting (tests/integration/conftest.py);
        # stop_ray reaps them.
        stop_ray()
        time.sleep(1.0)


def pull_vs_push_measured(cfg: T2IConfig, workdir: Path, jobs: int, steps: int) -> dict[str, Any]:
    """Both modes on Ray under ``cfg``'s spot trace; jobs/s each, their ratio, lost and redone jobs."""
    mc = cfg.model
    policy = build_policy(vocabulary([make_task(t, workdir) for t in cfg.tasks]), 16, mc.width, mc.layers, mc.heads, 0)
    policy.save(workdir / "policy")
    specs = _jobs(cfg, workdir, jobs, steps)
    runs = {mode: _run(mode, cfg, workdir / "policy", workdir, specs) for mode in ("pull", "push")}
    same = runs["pull"].pop("rewards") == runs["push"].pop("rewards")
    return {
        "pull": runs["pull"],
        "push": runs["push"],
        "throughput_ratio": runs["pull"]["jobs_per_s"] / runs["push"]["jobs_per_s"],
        "same_rewards": same,
        "jobs": jobs,
        "job_steps": steps,
        "seeds_per_job": cfg.explore.candidates,
        "slots": spot_slots(cfg)[1],
        "trace": cfg.spot.trace,
    }
