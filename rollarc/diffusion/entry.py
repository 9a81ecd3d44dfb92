"""``rollarc train`` for ``kind: t2i`` configs: pretrained base, run directory, Ray roles on pools, report."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray

from rollarc.configio import ConfigError, dump_yaml
from rollarc.diffusion.config import T2IClusterConfig, T2IConfig, load_t2i_config
from rollarc.diffusion.controller import T2IController, T2IWorkers
from rollarc.diffusion.pretrain import load_or_pretrain
from rollarc.diffusion.report import build_t2i_report
from rollarc.diffusion.spot_fleet import SpotFleet, cost_summary, preemption_schedule, spot_slots, start_local_cluster
from rollarc.diffusion.tasks.base import split
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.workers import T2ISampler, T2ITrainer
from rollarc.placement import pool_resource
from rollarc.ray_local_start import init_local_ray
from rollarc.report.metrics import MetricsWriter

CACHE = Path("artifacts") / "t2i"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def role_options(cluster: T2IClusterConfig, role: str) -> dict[str, Any]:
    """Ray options of one replica: a unit of its pool's resource, no CPU, pinned torch threads."""
    spec = getattr(cluster.roles, role)
    threads = str(spec.threads)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return {
        "num_cpus": 0,
        "resources": {pool_resource(spec.pool, cluster.pools[spec.pool]): spec.units} if spec.units else {},
        "runtime_env": {"env_vars": env},
    }


def new_run_dir(cfg: T2IConfig) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir, suffix = Path(cfg.run.dir) / f"{cfg.name}-{stamp}", 1
    while run_dir.exists():
        run_dir, suffix = Path(cfg.run.dir) / f"{cfg.name}-{stamp}-{suffix}", suffix + 1
    run_dir.mkdir(parents=True)
    return run_dir


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = sorted(p for p in (run_dir / "checkpoints").glob("step_*") if (p / "state.json").is_file())
    return found[-1] if found else None


def train_t2i_main(config_path: str, overrides: list[str]) -> int:
    return run_t2i(load_t2i_config(config_path, overrides))


def run_t2i(cfg: T2IConfig) -> int:
    """Pretrain (cached) or load the base, then run Flow-GRPO; returns an exit code. Writes summary.json."""
    start = time.time()
    tasks = [make_task(name, CACHE) for name in cfg.tasks]
    base = Path(cfg.model.path) if cfg.model.path else load_or_pretrain(cfg, tasks, _log)
    state: dict[str, Any] | None = None
    policy_dir = base
    if cfg.resume is not None:
        run_dir = Path(cfg.resume)
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            raise ConfigError(f"resume={run_dir}: no checkpoint under {run_dir / 'checkpoints'}")
        state = json.loads((checkpoint / "state.json").read_text())
        policy_dir = checkpoint / "policy"
        _log(f"resuming {run_dir} from {checkpoint.name}")
    else:
        run_dir = new_run_dir(cfg)
    (run_dir / "config.yaml").write_text(dump_yaml(cfg))
    step = int(state["step"]) if state else 0
    train_prompts = [p for t in tasks for p in split(t.prompts())[0]]
    heldout = [p for t in tasks for p in split(t.prompts())[1]]
    heldout = _interleave(heldout, tasks)
    if ray.is_initialized():
        ray.shutdown()
    cluster = start_local_cluster(cfg) if cfg.spot.enabled else None
    if cluster is not None:
        ray.init(address=cluster.address, logging_level=logging.WARNING)
    else:
        init_local_ray(  # never joins a cluster another process started here
            num_cpus=cfg.cluster.num_cpus or os.cpu_count() or 1,
            resources={pool_resource(n, p): float(p.count) for n, p in cfg.cluster.pools.items()},
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    metrics = None
    fleet = None
    try:
        cache, threads = str(CACHE), cfg.cluster.roles
        sampler = T2ISampler.options(**role_options(cfg.cluster, "sampler")).remote(  # type: ignore[attr-defined]  # @ray.remote class
            str(policy_dir), cfg.tasks, cache, threads.sampler.threads, step, cfg.cluster.sp_degree
        )
        explorer = None
        if cluster is not None:
            fleet = SpotFleet(
                cluster,
                spot_slots(cfg)[0],
                spot_slots(cfg)[1],
                preemption_schedule(cfg),
                cfg.spot.replacement_s,
                cfg.spot.lease_s,
                (str(policy_dir), cfg.tasks, cache, threads.explorer.threads),
                step,
                cfg.train.noise_level,
                target=cfg.spot.target,
                busy_wait_s=cfg.spot.busy_wait_s,
                sp_degree=cfg.cluster.sp_degree,
            )
        elif cfg.explore.enabled:
            explorer = T2ISampler.options(**role_options(cfg.cluster, "explorer")).remote(  # type: ignore[attr-defined]  # @ray.remote class
                str(policy_dir), cfg.tasks, cache, threads.explorer.threads, step, cfg.cluster.sp_degree
            )
        trainer = T2ITrainer.options(**role_options(cfg.cluster, "trainer")).remote(  # type: ignore[attr-defined]  # @ray.remote class
            str(policy_dir), str(base), cfg.train, threads.trainer.threads, step
        )
        if state is not None:
            ray.get(trainer.load_optimizer.remote(str(latest_checkpoint(run_dir))))
        metrics = MetricsWriter(run_dir, tensorboard=cfg.run.tensorboard, truncate_after_step=step if state else None)
        controller = T2IController(
            cfg, run_dir, T2IWorkers(trainer, sampler, explorer, fleet), train_prompts, heldout, metrics, step, state
        )
        summary = controller.run(_log)
        if fleet is not None:
            fleet.close()
            summary["spot"] = fleet.stats()
            summary["cost"] = cost_summary(cfg, summary["rl_wall_s"], summary["spot"]["spot_node_seconds"])
            _log(_spot_line(summary["spot"]))
    finally:
        if fleet is not None:
            fleet.close()
        if metrics is not None:
            metrics.close()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    summary.update(base=str(base), total_wall_s=time.time() - start, explore=cfg.explore.model_dump())
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    build_t2i_report(run_dir)
    print(f"run directory: {run_dir}")
    before, after = summary["heldout_reward_before_rl"], summary["heldout_reward_after_rl"]
    print(f"held-out reward: {before:.3f} before RL -> {after:.3f} after RL ({summary['steps']} steps)")
    return 0


def _spot_line(stats: dict[str, Any]) -> str:
    return (
        f"spot: {stats['completed']}/{stats['submitted']} exploration jobs done, {stats['lost_jobs']} lost, "
        f"{stats['duplicate_jobs']} duplicated; {stats['preemptions']} preemptions, "
        f"{stats['committed_on_notice']} in-flight commits, {stats['requeued_on_expiry']} lease expiries, "
        f"{stats['sp_regroups']} SP regroups, {stats['sp_joins']} SP joins"
    )


def _interleave(prompts: list[str], tasks: list[Any]) -> list[str]:
    """Held-out prompts alternating between tasks, so a short evaluation list covers every task."""
    per_task = [[p for p in prompts if p in set(t.prompts())] for t in tasks]
    out = []
    for i in range(max(len(x) for x in per_task)):
        out += [x[i] for x in per_task if i < len(x)]
    return out
