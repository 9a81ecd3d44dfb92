"""``rollarc train`` for ``kind: t2i`` configs: pretrained base, run directory, Ray roles on pools, report.

It shares the LLM path's run machinery (:mod:`rollarc.runtime.entry`): Ray is started (or joined, with
``--address`` or ``cluster.address``) by :func:`~rollarc.runtime.ray_cluster.start_cluster` (with ``spot.enabled``
locally a multi-node cluster whose spot nodes the fleet adds and removes; on a joined cluster the nodes that carry
the spot pool's resource, which the fleet only uses), the run directory is made, recorded, resumed and closed by
:mod:`rollarc.runtime.run_dir`, and a stop signal ends the run with a summary and the resume command. Only
the step loop is its own (:class:`~rollarc.diffusion.controller.T2IController`; docs/diffusion.md says why).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
import torch
from ray.cluster_utils import Cluster

from rollarc.config.io import ConfigError
from rollarc.diffusion.config import CACHE, T2IClusterConfig, T2IConfig, load_t2i_config
from rollarc.diffusion.controller import T2IController, T2IWorkers
from rollarc.diffusion.joined_nodes import JoinedNodes
from rollarc.diffusion.pretrain import load_or_pretrain
from rollarc.diffusion.report import build_t2i_report
from rollarc.diffusion.spot_fleet import SpotFleet
from rollarc.diffusion.spot_queue import HEAD_RESOURCE
from rollarc.diffusion.spot_setup import cost_summary, preemption_schedule, spot_slots
from rollarc.diffusion.t2i_device import device_problem, role_gpus
from rollarc.diffusion.tasks.base import split
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.workers import T2ISampler, T2ITrainer
from rollarc.models.checkpoint_write import DiskFull
from rollarc.rayproc.deadline import ActorHung, Deadlines
from rollarc.rayproc.placement import is_gpu_kind, pool_resource
from rollarc.report.metrics import MetricsWriter
from rollarc.runtime import stop_signals
from rollarc.runtime.ray_cluster import RayStart, local_nodes, start_cluster, stop_ray
from rollarc.runtime.run_dir import (
    finished,
    new_run_dir,
    partial_summary,
    record_new_run,
    resume_point,
    stop_summary,
    write_summary,
)
from rollarc.runtime.stop_signals import RunStopped

TRAINER_NAME = "t2i-trainer"  # its Ray name, before "-N" (the run's N-th trainer)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def role_options(cluster: T2IClusterConfig, role: str, device: str = "cpu") -> dict[str, Any]:
    """Ray options of one replica: a unit of its pool's resource, no CPU, pinned torch threads, and with
    ``model.device`` not ``cpu`` on a GPU-kind pool its GPUs (:func:`~rollarc.diffusion.t2i_device.role_gpus`)."""
    spec = getattr(cluster.roles, role)
    threads = str(spec.threads)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    options: dict[str, Any] = {
        "num_cpus": 0,
        "resources": {pool_resource(spec.pool, cluster.pools[spec.pool]): spec.units} if spec.units else {},
        "runtime_env": {"env_vars": env},
    }
    gpus = role_gpus_now(cluster, role, device)
    if gpus:
        options["num_gpus"] = gpus
    return options


def role_gpus_now(cluster: T2IClusterConfig, role: str, device: str) -> float:
    """GPUs one replica of ``role`` (and each of its SP members) reserves in the Ray cluster running now."""
    if device == "cpu":
        return 0.0
    spec = getattr(cluster.roles, role)
    pool = cluster.pools[spec.pool]
    cluster_gpus = float(ray.cluster_resources().get("GPU", 0.0))
    return role_gpus(device, is_gpu_kind(pool.kind), spec.units, cluster.address is not None, cluster_gpus)


def check_device_here(cfg: T2IConfig) -> None:
    """``model.device`` that cannot hold (cuda without a GPU, or on CPU-kind pools) fails in one line, before
    pretraining or Ray start (:func:`~rollarc.diffusion.t2i_device.device_problem`)."""
    roles = ["trainer", "sampler"] + (["explorer"] if cfg.explore.enabled else [])
    pools = {r: getattr(cfg.cluster.roles, r).pool for r in roles}
    problem = device_problem(
        cfg.model.device,
        joined=cfg.cluster.address is not None,
        has_cuda=torch.cuda.is_available(),
        role_pools={r: (p, is_gpu_kind(cfg.cluster.pools[p].kind)) for r, p in pools.items()},
        spot_local=cfg.spot.enabled and cfg.cluster.address is None,
    )
    if problem is not None:
        raise ConfigError(problem)


def ray_start(cfg: T2IConfig) -> RayStart:
    """How the t2i path starts Ray: its pools as logical resources; with ``spot.enabled`` the spot pool's
    nodes join during the run (added and removed by the fleet) and the head holds the fleet's queue.

    On a cluster the run joins (``cluster.address``) the pools are that cluster's resources, checked at start-up as
    on the LLM path, except the spot pool: its nodes come and go, and the fleet checks that some are there."""
    spot, local = cfg.spot.enabled, cfg.cluster.address is None
    return RayStart(
        pools=cfg.cluster.pools,
        num_cpus=cfg.cluster.num_cpus,
        address=cfg.cluster.address,
        joining_pools=(cfg.cluster.roles.explorer.pool,) if spot else (),
        head_resources={HEAD_RESOURCE: 1.0} if spot and local else {},
    )


def train_t2i_main(config_path: str, overrides: list[str], address: str | None = None) -> int:
    cfg = load_t2i_config(config_path, overrides)
    if address is not None:  # joining a cluster, as on the LLM path (rollarc.runtime.entry)
        cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": address})})
    return run_t2i(cfg)


def check_joinable(cfg: T2IConfig) -> None:
    """On a cluster the run joins, the preemption injector has no nodes of its own to preempt: a config that asks
    for injected preemptions there is refused in one line, before anything starts."""
    if cfg.cluster.address is None or not cfg.spot.enabled:
        return
    if cfg.spot.trace is not None or cfg.spot.rate_per_hour > 0:
        raise ConfigError(
            f"spot.trace / spot.rate_per_hour: the preemption injector removes nodes that rollarc started, and on the "
            f"cluster at {cfg.cluster.address} it started none (preemptions there are the provider's drains); set "
            "spot.trace=null and spot.rate_per_hour=0 (configs/t2i_spot_cluster.yaml)"
        )


def spot_nodes(cfg: T2IConfig) -> Cluster | JoinedNodes:
    """The fleet's spot nodes: the local cluster's (it adds and removes them) or the joined cluster's (it uses them)."""
    if cfg.cluster.address is None:
        return local_nodes()
    return JoinedNodes(spot_slots(cfg)[0], cfg.spot.node_poll_s)


def start_sampler(cfg: T2IConfig, role: str, policy_dir: Path, step: int) -> Any:
    """A :class:`T2ISampler` as ``role`` (the sampler, or the explorer when not on spot) on its pool; each of its SP
    members reserves the GPUs the role does."""
    options = role_options(cfg.cluster, role, cfg.model.device)
    return T2ISampler.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
        str(policy_dir),
        cfg.tasks,
        str(CACHE),
        getattr(cfg.cluster.roles, role).threads,
        step,
        cfg.cluster.sp_degree,
        cfg.model.device,
        options.get("num_gpus", 0.0),
    )


def run_t2i(cfg: T2IConfig) -> int:
    """Pretrain (cached) or load the base, then run Flow-GRPO; returns an exit code (``128 + signal`` when
    stopped by a signal). Writes summary.json."""
    start = time.time()
    check_joinable(cfg)
    check_device_here(cfg)
    tasks = [make_task(name, CACHE) for name in cfg.tasks]
    base = Path(cfg.model.path) if cfg.model.path else load_or_pretrain(cfg, tasks, _log)
    state: dict[str, Any] | None = None
    policy_dir = base
    resumes = 0
    if cfg.resume is not None:
        resume = resume_point(cfg)  # checked and recorded as on the LLM path
        run_dir, state, resumes = resume.run_dir, resume.state, resume.resumes
        policy_dir = resume.checkpoint / "policy"
        _log(f"resuming {run_dir} from {resume.checkpoint.name}")
    else:
        run_dir = new_run_dir(cfg.run.dir, cfg.name)
        record_new_run(run_dir, cfg)
    step = int(state["step"]) if state else 0
    train_prompts = [p for t in tasks for p in split(t.prompts())[0]]
    heldout = [p for t in tasks for p in split(t.prompts())[1]]
    heldout = _interleave(heldout, tasks)
    metrics = None
    fleet = None
    controller: T2IController | None = None
    stopped: RunStopped | None = None
    try:
        device = cfg.model.device
        start_cluster(ray_start(cfg), device=device)
        stop_signals.install()  # ray.init replaced the SIGTERM handler with one that exits mid-step
        cache, threads = str(CACHE), cfg.cluster.roles
        sampler = start_sampler(cfg, "sampler", policy_dir, step)
        explorer = None
        if cfg.spot.enabled:
            fleet = SpotFleet(
                spot_nodes(cfg),
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
                heartbeat_every=cfg.spot.heartbeat_every,
                deadlines=Deadlines.of(cfg.cluster),
                drain_poll_s=cfg.spot.drain_poll_s,
                device=device,
                # the local fleet's spot nodes have no GPUs (check_device_here refuses cuda there)
                gpus=role_gpus_now(cfg.cluster, "explorer", device) if cfg.cluster.address is not None else 0.0,
            )
        elif cfg.explore.enabled:
            explorer = start_sampler(cfg, "explorer", policy_dir, step)
        serials = itertools.count()

        def new_trainer(checkpoint: Path | None, version: int) -> Any:
            """A trainer at ``version`` from ``checkpoint`` (None: the policy the run started from); named
            ``t2i-trainer-N``, N counting the run's trainers (the chaos benchmark finds the newest by it)."""
            resumed_from = policy_dir.parent if state is not None else None  # the checkpoint resumed from
            policy, optimizer = (checkpoint / "policy", checkpoint) if checkpoint else (policy_dir, resumed_from)
            options = {"name": f"{TRAINER_NAME}-{next(serials)}", **role_options(cfg.cluster, "trainer", device)}
            handle = T2ITrainer.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
                str(policy), str(base), cfg.train, threads.trainer.threads, version, device
            )
            if optimizer is not None:
                ref = handle.load_optimizer.remote(str(optimizer))
                Deadlines.of(cfg.cluster).get("start", ref, "the trainer", "load_optimizer")
            return handle

        workers = T2IWorkers(new_trainer(None, step), sampler, explorer, fleet, restart_trainer=new_trainer)
        metrics = MetricsWriter(run_dir, tensorboard=cfg.run.tensorboard, truncate_after_step=step if state else None)
        controller = T2IController(cfg, run_dir, workers, train_prompts, heldout, metrics, step, state)
        summary = controller.run(_log)
        if fleet is not None:
            fleet.close()
            summary["spot"] = fleet.stats()
            summary["cost"] = cost_summary(cfg, summary["rl_wall_s"], summary["spot"]["spot_node_seconds"])
            _log(_spot_line(summary["spot"]))
    except RunStopped as err:  # a stop signal: summary.json and one line below, after Ray is stopped
        stopped = err
    except (ActorHung, DiskFull) as err:  # a hung actor, a full disk: one line and the summary, not a traceback
        print(f"rollarc: run stopped: {err}", file=sys.stderr)
        write_summary(run_dir, _stopped(cfg, controller, str(err), step, start, resumes))
        return 1
    except BaseException as err:  # recorded in summary.json, then re-raised: a dead worker, a bug
        write_summary(run_dir, _stopped(cfg, controller, f"{type(err).__name__}: {err}", step, start, resumes))
        raise
    finally:
        if fleet is not None:
            fleet.close()
        if metrics is not None:
            metrics.close()
        stop_ray()
    if stopped is not None:
        return stop_summary(run_dir, stopped, _stopped(cfg, controller, stopped.name, step, start, resumes))
    summary.update(base=str(base), explore=cfg.explore.model_dump(), ray_address=cfg.cluster.address)
    summary = finished(summary, start, resumes)
    write_summary(run_dir, summary)
    build_t2i_report(run_dir)
    print(f"run directory: {run_dir}")
    before, after = summary["heldout_reward_before_rl"], summary["heldout_reward_after_rl"]
    print(f"held-out reward: {before:.3f} before RL -> {after:.3f} after RL ({summary['steps']} steps)")
    return 0


def _stopped(
    cfg: T2IConfig, controller: T2IController | None, reason: str, step: int, start: float, resumes: int
) -> dict[str, Any]:
    """``summary.json`` of a run that stopped before its last step: the reason and the counts so far."""
    counts = controller.summary() if controller is not None else {"steps": step}
    return partial_summary(counts, cfg.name, reason, start, resumes)


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
