"""Held-out evaluation of a training run: episodes on seeds disjoint from training, spread over the EnvWorkers.

Apart from the step loop because it runs outside it: the plan asks for it between steps, it waits on its own
episodes, and a chunk whose EnvWorker dies runs again on the replacement (``async.max_group_retries``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError

from rollarc.agent.local_eval import heldout_specs
from rollarc.agent.runner import EpisodeSpec
from rollarc.agent.trajectory import Trajectory
from rollarc.config import Config
from rollarc.report.metrics import TimelineWriter
from rollarc.runtime.run_counters import Counters
from rollarc.runtime.run_errors import RunError, remote_cause
from rollarc.runtime.run_limits import check_chunk_retries
from rollarc.runtime.workers import Workers


def evaluate(
    cfg: Config,
    workers: Workers,
    counters: Counters,
    heal: Callable[[], None],
    timeline: TimelineWriter,
    run_start: float,
    version: int,
    label: str,
) -> dict[str, Any]:
    """Held-out episodes (seeds disjoint from training) at ``train.eval_temperature``, on the EnvWorkers."""
    n = cfg.train.eval_episodes
    t0 = time.time()
    if n == 0:
        return {"label": label, "version": version, "success": float("nan"), "episodes": 0}
    t = cfg.train
    specs = heldout_specs(list(cfg.tasks), n, t.eval_seed_base, f"eval-{label}", t.eval_temperature)
    trajs = run_episodes(workers, counters, heal, cfg.async_.max_group_retries, specs)
    result = evaluation_record(cfg, label, version, trajs, time.time() - t0, time.time() - run_start)
    timeline.write(
        [
            {
                "worker": "controller",
                "role": "controller",
                "kind": "eval",
                "t0": t0,
                "t1": time.time(),
                "step": version,
            }
        ]
    )
    return result


def evaluation_record(
    cfg: Config, label: str, version: int, trajs: list[Trajectory], seconds: float, wall_s: float
) -> dict[str, Any]:
    """One held-out evaluation as a run records it (``summary.json``'s ``evals``), live or deferred alike."""
    ok = [t for t in trajs if t.status == "ok"]
    per_task = {}
    for task in cfg.tasks:
        ts = [t for t in trajs if t.task == task.name]
        per_task[task.name] = float(np.mean([t.success for t in ts])) if ts else float("nan")
    return {
        "label": label,
        "version": version,
        "episodes": len(trajs),
        "success": float(np.mean([t.success for t in trajs])),
        "reward": float(np.mean([t.reward for t in ok])) if ok else float("nan"),
        "tool_calls": float(np.mean([t.tool_calls for t in ok])) if ok else float("nan"),
        "failed": len(trajs) - len(ok),
        "per_task": per_task,
        "seconds": seconds,
        "wall_s": wall_s,
    }


def run_episodes(
    workers: Workers,
    counters: Counters,
    heal: Callable[[], None],
    max_retries: int,
    specs: list[EpisodeSpec],
) -> list[Trajectory]:
    """Spread ``specs`` over the EnvWorkers; a chunk whose worker dies runs again on its replacement."""
    names = workers.alive_env_names()
    todo = [specs[i :: len(names)] for i in range(len(names))]
    done: list[Trajectory] = []
    deaths: Counter[str] = Counter()  # a chunk (by its first episode) -> EnvWorker deaths it was on
    while todo:
        names = workers.alive_env_names()
        refs = {
            workers.env[names[i % len(names)]].run_episodes.remote(chunk): (chunk, names[i % len(names)])
            for i, chunk in enumerate(todo)
        }
        todo = []
        waiting = list(refs)
        started = time.time()
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=1.0)
            if waiting:  # each episode ends within async.trajectory_timeout_s on a live EnvWorker
                late = ", ".join(refs[ref][1] for ref in waiting)
                workers.deadlines.check("train", started, late, "run_episodes")
            for ref in ready:
                chunk, name = refs[ref]
                try:
                    done.extend(workers.deadlines.get("call", ref, name, "run_episodes"))  # ready
                except RayActorError:
                    if name in workers.env:
                        workers.replace_env(name)
                        counters.env_worker_restarts += 1
                    deaths[chunk[0].traj_id] += 1
                    check_chunk_retries(chunk, deaths[chunk[0].traj_id], max_retries)
                    counters.retried_eval_chunks += 1
                    todo.append(chunk)
                except RayTaskError as err:  # not an episode's failure (those are counted): the worker raised
                    raise RunError(f"evaluation episodes failed in {name}: {remote_cause(err)}") from None
            heal()  # turns of these episodes wait on a restarted router until it has its replicas
    order = {spec.traj_id: i for i, spec in enumerate(specs)}
    return sorted(done, key=lambda t: order[t.traj_id])
