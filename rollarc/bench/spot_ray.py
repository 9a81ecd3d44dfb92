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

Where each mode's time went (``time_accounting``, measured, per mode): the fleet's slot-seconds (slots × wall)
split into ``busy_slot_s`` (each finished job's seconds on its worker, sampling and scoring), ``down_slot_s``
(a slot without a node: from its loss to its replacement's join), ``tail_idle_slot_s`` (a slot whose last job
was done before the run ended: the imbalance a static plan leaves at the end) and ``other_slot_s`` (the rest:
round trips between jobs and heartbeats' cost, a replacement loading its DiT, work lost to a preemption).
``job_s_median`` compares the cost of one job in each mode.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import ray

from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.model import build_policy
from rollarc.diffusion.push_fleet import push_all
from rollarc.diffusion.spot_explorer import slot_of
from rollarc.diffusion.spot_fleet import SpotFleet
from rollarc.diffusion.spot_queue import HEAD_RESOURCE
from rollarc.diffusion.spot_setup import preemption_schedule, spot_slots
from rollarc.diffusion.tasks.registry import make_task, vocabulary
from rollarc.runtime.ray_cluster import RayStart, local_nodes, start_cluster, stop_ray
from rollarc.spotlight.job_queue import JobSpec


def _jobs(cfg: T2IConfig, cache: Path, count: int, steps: int) -> list[JobSpec]:
    prompts = [p for name in cfg.tasks for p in make_task(name, cache).prompts()]
    seeds = cfg.explore.candidates
    return [
        JobSpec(i, prompts[i % len(prompts)], tuple(range(i * seeds, (i + 1) * seeds)), 0, steps) for i in range(count)
    ]


def time_accounting(
    results: list[dict[str, Any]], events: list[tuple[float, str, str]], slots: int, start_epoch: float, wall_s: float
) -> dict[str, float]:
    """Where a mode's slot-seconds went (module docstring), from its finished jobs' results (``worker``,
    ``seconds``, ``done_at`` on the epoch clock) and the fleet's events (seconds since the jobs were handed out)."""
    busy = sum(float(r["seconds"]) for r in results)
    last = dict.fromkeys(range(slots), 0.0)  # when each slot's last job was done
    for r in results:
        slot = slot_of(r["worker"])
        last[slot] = max(last[slot], float(r["done_at"]) - start_epoch)
    down: dict[int, list[tuple[float, float]]] = {slot: [] for slot in range(slots)}  # (from, to) without a node
    lost_at: dict[int, float] = {}
    for at, what, who in events:
        if what in ("preempted", "lost without notice"):
            lost_at[slot_of(who)] = max(at, 0.0)
        elif what == "join" and slot_of(who) in lost_at:
            down[slot_of(who)].append((lost_at.pop(slot_of(who)), min(at, wall_s)))
    for slot, at in lost_at.items():  # never replaced before the end
        down[slot].append((at, wall_s))

    def overlap(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
        return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans)

    down_s = sum(overlap(spans, 0.0, wall_s) for spans in down.values())
    # after its last job a slot idles while it has a node (the time it had none is down, counted once)
    tail = sum(max(0.0, wall_s - last[slot]) - overlap(down[slot], last[slot], wall_s) for slot in range(slots))
    total = slots * wall_s
    return {
        "slot_s": total,
        "busy_slot_s": busy,
        "down_slot_s": down_s,
        "tail_idle_slot_s": tail,
        "other_slot_s": total - busy - down_s - tail,
        "busy_share": busy / total if total > 0 else 0.0,
        "job_s_median": statistics.median(float(r["seconds"]) for r in results) if results else 0.0,
    }


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
            drain_poll_s=sc.drain_poll_s,
        )
        with fleet.lock:
            workers = [n.worker for n in fleet.nodes.values()]
        ray.get([w.ready.remote() for w in workers])
        t0, t0_epoch = time.perf_counter(), time.time()
        if mode == "pull":
            fleet.start_pulling()
            ids = fleet.launch([j.prompt for j in jobs], [list(j.seeds) for j in jobs], jobs[0].steps, 0)
            rewards = fleet.wait(ids)["rewards"]
            seconds = time.perf_counter() - t0
            results = ray.get(fleet.queue.results.remote(ids))
            stats = fleet.stats()
            out = {
                "completed": stats["completed"],
                "lost_jobs": stats["lost_jobs"],
                "duplicate_jobs": stats["duplicate_jobs"],
                "redone_jobs": stats["requeued_on_expiry"],
                "committed_on_notice": stats["committed_on_notice"],
                "notice_source": stats["notice_source"],
                "drain_notices": stats["drain_notices"],
                "lost_steps": stats["lost_steps"],
            }
        else:
            fleet.start_schedule()
            outcome = push_all(fleet, jobs)
            seconds = time.perf_counter() - t0
            results = [outcome.results[j.job_id] for j in jobs]
            rewards = [r["rewards"] for r in results]
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
            time_accounting=time_accounting(results, fleet.log.events, spot_slots(cfg)[1], t0_epoch, seconds),
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
