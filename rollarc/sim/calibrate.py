"""Fit per-operation costs from real runs' timelines, then predict their step times by simulation.

What is fitted (ordinary least squares, refitted without any coefficient that comes out negative,
so that every cost stays physical; numpy has no NNLS and scipy is not a dependency):

- a turn's ``generate`` span: ``request_overhead · admissions + prefill_per_token · admitted_prompt
  + new_tokens · (decode_base + decode_per_seq · batch)``, which becomes a :class:`LinearEngine`.
  As in the simulated engine, a prefill stalls every turn decoding on that worker, so
  ``admissions`` and ``admitted_prompt`` count all turns that started on the same worker during the
  span (itself included). ``batch`` is the mean number of generate spans open on the worker during
  the span, taken from the timeline rather than the span's ``batch`` field, because a batch size
  sampled once per turn misses the turns that join and leave while it decodes;
- a ``train`` span: ``fixed + per_token · tokens``, a :class:`LinearTrain`;
- ``sync``: the mean span;
- per task, the empirical distributions of turns per trajectory, first and later prompt tokens (not
  cached), new tokens per turn, env-step and reward latencies (resampled by the simulator);
- engines: the distinct rollout workers; the engine batch cap: the largest batch seen; env
  concurrency: the most env steps seen at once, but never fewer than the trajectories the predicted
  run can have in flight (``B·G·(k+1)``): each rollarc trajectory is its own asyncio task and env
  latency is a non-blocking wait, so the concurrency a run shows is a lower bound of the capacity, and
  a synchronous run's would wrongly throttle an asynchronous prediction.

The prediction runs the same simulator as every scenario, in both modes: synchronous and
asynchronous (the run's own ``k``, or 1 for a synchronous run). The error is reported for the mode
each run actually used, against the mean of its ``metrics.jsonl`` step times.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rollarc.cluster.distributions import Constant, Empirical
from rollarc.cluster.engine_cost import LinearEngine, LinearTrain
from rollarc.cluster.workload import split_groups
from rollarc.config.io import ConfigError
from rollarc.policy.freshness import max_in_flight_groups
from rollarc.report.run_dir import Span
from rollarc.sim.run_dir import RunRecord
from rollarc.sim.setup import PoolBilling, RewardSetup, RolloutPoolSetup, SimSetup, TaskSetup
from rollarc.sim.simulator import simulate


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0: drop the most negative one and refit until none is."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            return coef
        del active[int(np.argmin(sol))]
    return coef


@dataclass(frozen=True)
class FittedCosts:
    engine: LinearEngine
    engines: int
    train: LinearTrain
    sync_s: float
    env_slots: int
    tasks: list[TaskSetup]
    task_shares: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        e = self.engine
        return {
            "engines": self.engines,
            "request_overhead_s": e.request_overhead_s,
            "prefill_per_token_s": e.prefill_per_token_s,
            "decode_base_s": e.decode_base_s,
            "decode_per_seq_s": e.decode_per_seq_s,
            "max_batch": e.max_batch,
            "train_fixed_s": self.train.fixed_s,
            "train_per_token_s": self.train.per_token_s,
            "sync_s": self.sync_s,
            "env_slots": self.env_slots,
            "task_shares": self.task_shares,
        }


def _max_concurrency(spans: list[Span]) -> int:
    edges = sorted([(s.t0, 1) for s in spans] + [(s.t1, -1) for s in spans], key=lambda e: (e[0], e[1]))
    best = level = 0
    for _t, delta in edges:
        level += delta
        best = max(best, level)
    return best


def _mean_concurrency(spans: list[Span]) -> np.ndarray:
    """For each span, the time-average number of spans of the same worker open during it."""
    out = np.ones(len(spans))
    by_worker: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        by_worker[s.worker].append(i)
    for indices in by_worker.values():
        t0 = np.array([spans[i].t0 for i in indices], dtype=float)
        t1 = np.array([spans[i].t1 for i in indices], dtype=float)
        times = np.concatenate([t0, t1])
        deltas = np.concatenate([np.ones_like(t0), -np.ones_like(t1)])
        order = np.lexsort((deltas, times))
        times, level = times[order], np.cumsum(deltas[order])
        # integral of the open-span count from the first edge up to each edge
        area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])
        width = np.maximum(t1 - t0, 1e-12)
        mean = (np.interp(t1, times, area) - np.interp(t0, times, area)) / width
        out[indices] = np.maximum(mean, 1.0)
    return out


def _admitted_during(spans: list[Span], prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each span: how many spans of the same worker started within it, and their prompt tokens."""
    count = np.zeros(len(spans))
    tokens = np.zeros(len(spans))
    by_worker: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        by_worker[s.worker].append(i)
    for indices in by_worker.values():
        idx = np.array(indices)
        t0 = np.array([spans[i].t0 for i in indices], dtype=float)
        t1 = np.array([spans[i].t1 for i in indices], dtype=float)
        order = np.argsort(t0, kind="stable")
        starts = t0[order]
        cum = np.concatenate([[0.0], np.cumsum(prompt[idx][order])])
        lo = np.searchsorted(starts, t0, side="left")
        hi = np.searchsorted(starts, t1, side="left")
        hi = np.maximum(hi, lo + 1)  # the span's own admission, even for a zero-length span
        count[idx] = hi - lo
        tokens[idx] = cum[hi] - cum[lo]
    return count, tokens


def _empirical(values: list[float], fallback: float = 0.0) -> Empirical | Constant:
    return Empirical(values=values) if values else Constant(value=fallback)


def fit_costs(runs: list[RunRecord]) -> FittedCosts:
    """Fit one set of costs to all ``runs`` together (they should share hardware and model)."""
    generate = [s for run in runs for s in run.spans_of("generate")]
    train = [s for run in runs for s in run.spans_of("train")]
    if len(generate) < 4 or not train:
        raise ConfigError("calibration needs at least 4 generate spans and 1 train span in the timelines")
    for span in generate:
        if span.new_tokens is None or span.prompt_tokens is None:
            raise ConfigError(f"generate span of worker {span.worker!r} at t0={span.t0} lacks prompt_tokens/new_tokens")
    duration = np.array([s.t1 - s.t0 for s in generate])
    uncached = np.array([(s.prompt_tokens or 0) - (s.cached_tokens or 0) for s in generate], dtype=float)
    new = np.array([s.new_tokens for s in generate], dtype=float)
    batch = _mean_concurrency(generate)
    admissions, admitted = _admitted_during(generate, uncached)
    features = np.column_stack([admissions, admitted, new, new * batch])
    overhead, per_prompt, base, per_seq = nonnegative_lstsq(features, duration)
    if base + per_seq <= 0:
        raise ConfigError("calibration: generate spans do not grow with new_tokens; cannot fit a decode cost")
    engine = LinearEngine(
        prefill_per_token_s=float(per_prompt),
        request_overhead_s=float(overhead),
        decode_base_s=float(base),
        decode_per_seq_s=float(per_seq),
        decode_per_ctx_token_s=0.0,
        kv_capacity_tokens=float("inf"),
        max_batch=int(batch.max()),
    )
    t_dur = np.array([s.t1 - s.t0 for s in train])
    t_tok = np.array([s.tokens or 0 for s in train], dtype=float)
    fixed, per_token = nonnegative_lstsq(np.column_stack([np.ones_like(t_tok), t_tok]), t_dur)
    sync = [s.t1 - s.t0 for run in runs for s in run.spans_of("sync")]
    env_spans = [s for run in runs for s in run.spans_of("env_step")]
    return FittedCosts(
        engine=engine,
        engines=max(len({s.worker for s in run.spans_of("generate")}) for run in runs),
        train=LinearTrain(float(fixed), float(per_token)),
        sync_s=float(np.mean(sync)) if sync else 0.0,
        env_slots=max(_max_concurrency(env_spans), 1),
        tasks=_fit_tasks(runs),
        task_shares=_task_shares(runs),
    )


def _task_shares(runs: list[RunRecord]) -> dict[str, float]:
    trajs: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for s in run.spans_of("generate"):
            trajs[s.task or "task"].add(f"{run.path}:{s.traj}")
    total = sum(len(v) for v in trajs.values())
    return {task: len(v) / total for task, v in sorted(trajs.items())}


def _fit_tasks(runs: list[RunRecord]) -> list[TaskSetup]:
    turns: dict[str, list[tuple[str, Span]]] = defaultdict(list)
    env_lat: dict[str, list[float]] = defaultdict(list)
    reward_lat: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for s in run.spans:
            task = s.task or "task"
            if s.kind == "generate":
                turns[task].append((f"{run.path}:{s.traj}", s))
            elif s.kind == "env_step":
                env_lat[task].append(s.t1 - s.t0)
            elif s.kind == "reward":
                reward_lat[task].append(s.t1 - s.t0)
    tasks = []
    for task, spans in sorted(turns.items()):
        by_traj: dict[str, list[Span]] = defaultdict(list)
        for traj, s in spans:
            by_traj[traj].append(s)
        first: list[float] = []
        later: list[float] = []
        new: list[float] = []
        counts: list[int] = []
        for traj_spans in by_traj.values():
            traj_spans.sort(key=lambda s: s.t0)
            counts.append(len(traj_spans))
            for i, s in enumerate(traj_spans):
                (first if i == 0 else later).append(float((s.prompt_tokens or 0) - (s.cached_tokens or 0)))
                new.append(float(s.new_tokens or 0))
        tasks.append(
            TaskSetup(
                name=task,
                groups_per_step=0,  # set from the run's B when predicting
                rollout_pool="rollout",
                first_prompt=_empirical(first, 1),
                prompt=_empirical(later or first, 1),
                response=_empirical(new, 1),
                turns=_empirical([float(c) for c in counts], 1),
                env_latency=_empirical(env_lat.get(task, [])),
                reward_latency=_empirical(reward_lat.get(task, [])),
                reward_service=None,
            )
        )
    return tasks


def setup_for(costs: FittedCosts, run: RunRecord, max_staleness: int, seed: int = 0) -> SimSetup:
    """A simulation of ``run``'s job (its B, G and steps) on the fitted costs, with bound ``k``."""
    groups = split_groups(run.groups_per_step, costs.task_shares)
    return SimSetup(
        name=f"calibrated:{run.path.name}",
        tasks=[replace(t, groups_per_step=groups.get(t.name, 0)) for t in costs.tasks],
        rollout=[RolloutPoolSetup("rollout", costs.engines, costs.engine)],
        env_pool="env",
        env_slots=max(costs.env_slots, max_in_flight_groups(run.groups_per_step, max_staleness) * run.group_size),
        train_pool="train",
        train=costs.train,
        reward=RewardSetup("dedicated", "reward", 0),
        sync_s=costs.sync_s,
        swap_s=0.0,
        max_staleness=max_staleness,
        max_overtake=run.max_overtake,
        groups_per_step=run.groups_per_step,
        group_size=run.group_size,
        steps=len(run.step_times),
        seed=seed,
        pools={name: PoolBilling(name, name, 1, 0.0) for name in ("rollout", "env", "train", "reward")},
    )


def calibrate(runs: list[RunRecord], seed: int = 0, holdout: bool = False) -> dict[str, Any]:
    """Fit, predict each run in sync and async mode, and report the error for the mode it used.

    ``holdout``: predict each run from costs fitted on the *other* runs only (for example a
    synchronous run's costs predicting an asynchronous run), instead of one fit to all of them.
    """
    if holdout and len(runs) < 2:
        raise ConfigError("--holdout needs at least two run directories (each is predicted from the others)")
    costs = fit_costs(runs)
    report: dict[str, Any] = {"fitted": costs.as_dict(), "holdout": holdout, "runs": []}
    for i, run in enumerate(runs):
        run_costs = fit_costs(runs[:i] + runs[i + 1 :]) if holdout else costs
        async_k = run.max_staleness if run.max_staleness > 0 else 1
        predicted = {
            "sync": simulate(setup_for(run_costs, run, 0, seed)).step_time_s,
            f"async({async_k})": simulate(setup_for(run_costs, run, async_k, seed)).step_time_s,
        }
        measured = float(np.mean(run.step_times))
        own = predicted["sync" if run.max_staleness == 0 else f"async({async_k})"]
        report["runs"].append(
            {
                "run_dir": str(run.path),
                "mode": run.mode,
                "steps": len(run.step_times),
                "measured_step_time_s": measured,
                "predicted_step_time_s": predicted,
                "error": abs(own - measured) / measured,
                **({"fitted_on_others": run_costs.as_dict()} if holdout else {}),
            }
        )
    report["max_error"] = max(r["error"] for r in report["runs"])
    return report
