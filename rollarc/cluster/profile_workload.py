"""A workload profile built from a run's measured task profiles (``RUN_DIR/task_profiles.json``).

The runtime measures (typed by :mod:`rollarc.report.run_dir`), per task, turns per trajectory, prompt and generated tokens per turn, cached
prompt tokens, env-step and reward latencies, each as a mean and quantiles (p50, p90, p99). This
module turns them into the :class:`~rollarc.cluster.workload.TaskProfile` distributions the planner
and the simulator read, so a plan or a simulation can start from what a real run did rather than
from assumed shapes. The model and efficiencies are not the run's (a laptop's tiny model says nothing
about a 128-GPU cluster): they come from a workload file the caller chooses.

From a summary to a distribution (:func:`distribution_from_summary`): the quantile function is
taken as piecewise linear through ``(0, lo) (0.5, p50) (0.9, p90) (0.99, p99) (1, hi)`` and sampled
at ``GRID`` evenly spaced quantiles (an :class:`Empirical` distribution). The two ends the summary
does not give are set so that the distribution's mean is the measured mean (which is exact, not a
sample estimate): ``hi = p99`` and ``lo`` in ``[0, p50]`` when that suffices, else ``lo = p50`` and
``hi`` above ``p99`` (a heavier tail than the quantiles show). Scipy has no "distribution from three
quantiles and a mean", and a lognormal fitted to them cannot honour all four numbers, hence this.

Prompts: the simulator prefills only a turn's new (uncached) prompt tokens and keeps the
trajectory's context in the KV cache. The measured prompt length per turn includes what the prefix
cache served, so its distribution is scaled by the uncached share
``1 − cached_per_trajectory / (prompt_per_turn · turns)``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rollarc.cluster.distributions import Constant, Empirical
from rollarc.cluster.workload import BatchSpec, Efficiency, ModelSpec, RewardSpec, Workload
from rollarc.cluster.workload import TaskProfile as PlannedTask
from rollarc.config.io import ConfigError
from rollarc.report.run_dir import QuantileSummary, TaskProfile, TaskProfiles

GRID = 200
KNOTS = (0.0, 0.5, 0.9, 0.99, 1.0)


def _quantile_grid(lo: float, p50: float, p90: float, p99: float, hi: float) -> np.ndarray:
    q = (np.arange(GRID) + 0.5) / GRID
    return np.interp(q, KNOTS, [lo, p50, p90, p99, hi])


def distribution_from_summary(summary: QuantileSummary | None, where: str = "summary") -> Constant | Empirical:
    """A distribution with the summary's mean, p50, p90 and p99 (see the module docstring)."""
    if summary is None or not summary.n:  # nothing measured (e.g. no reward time): costs nothing
        return Constant(value=0.0)
    mean, p50, p90, p99 = summary.mean, summary.p50, summary.p90, summary.p99
    values = [mean, p50, p90, p99]
    if not all(math.isfinite(v) and v >= 0 for v in values) or not p50 <= p90 <= p99:
        raise ConfigError(
            f"{where}: mean and quantiles must be finite, >= 0 and p50 <= p90 <= p99 (got mean={mean}, p50={p50}, "
            f"p90={p90}, p99={p99})"
        )
    if p99 - p50 <= 1e-12 * max(p99, 1.0) and abs(mean - p50) <= 1e-9 * max(mean, 1.0):
        return Constant(value=mean)
    # The grid's mean is linear in the two free ends: mean = known + a·lo + b·hi.
    known = float(_quantile_grid(0.0, p50, p90, p99, 0.0).mean())
    a = float(_quantile_grid(1.0, 0.0, 0.0, 0.0, 0.0).mean())
    b = float(_quantile_grid(0.0, 0.0, 0.0, 0.0, 1.0).mean())
    lo = (mean - known - b * p99) / a
    hi = p99
    if lo > p50:
        lo = p50
        hi = (mean - known - a * lo) / b
    lo = min(max(lo, 0.0), p50)  # a mean below what the quantiles allow: the closest we can get
    return Empirical(values=_quantile_grid(lo, p50, p90, p99, hi).tolist())


def _scaled(summary: QuantileSummary, factor: float) -> QuantileSummary:
    return replace(
        summary,
        mean=summary.mean * factor,
        p50=summary.p50 * factor,
        p90=summary.p90 * factor,
        p99=summary.p99 * factor,
    )


def uncached_share(profile: TaskProfile) -> float:
    """Share of prompt tokens the engine had to prefill (the rest came from the prefix cache)."""
    prompt = profile.prompt_tokens_per_turn.mean * profile.turns.mean
    cached = profile.cached_tokens.mean if math.isfinite(profile.cached_tokens.mean) else 0.0
    if not prompt > 0:
        return 1.0
    return min(max(1.0 - cached / prompt, 0.0), 1.0)


def task_from_profile(name: str, profile: TaskProfile, share: float, where: str = "task_profiles") -> PlannedTask:
    """One task's measured profile as a planner/simulator task."""
    if not profile.turns.n:
        raise ConfigError(f"{where}: tasks.{name} has no completed trajectory to profile (turns.n is 0)")

    def fit(key: str, summary: QuantileSummary | None) -> Constant | Empirical:
        return distribution_from_summary(summary, f"{where}: tasks.{name}.{key}")

    return PlannedTask(
        name=name,
        share=share,
        prompt_tokens=fit("prompt_tokens_per_turn", _scaled(profile.prompt_tokens_per_turn, uncached_share(profile))),
        response_tokens=fit("new_tokens_per_turn", profile.new_tokens_per_turn),
        turns=fit("turns", profile.turns),
        env_latency_s=fit("env_step_s", profile.env_step_s),
        reward=RewardSpec(kind="rule", latency_s=fit("reward_s", profile.reward_s)),
    )


def workload_from_profiles(
    profiles: TaskProfiles,
    model: ModelSpec,
    efficiency: Efficiency,
    groups_per_step: int | None = None,
    where: str = "task_profiles",
) -> Workload:
    """The run's tasks, task mix (weights), B, G and k, on ``model`` with ``efficiency``."""
    unprofiled = sorted(set(profiles.weights) - set(profiles.tasks))
    if unprofiled:
        raise ConfigError(
            f"{where}: task(s) {', '.join(unprofiled)} have a weight but no profile (no trajectory finished)"
        )
    return Workload(
        model=model,
        efficiency=efficiency,
        batch=BatchSpec(
            groups_per_step=groups_per_step or profiles.groups_per_step,
            group_size=profiles.group_size,
            max_staleness=profiles.max_staleness,
        ),
        tasks=[
            task_from_profile(name, profiles.tasks[name], float(profiles.weights.get(name, 1.0)), where)
            for name in sorted(profiles.tasks)
        ],
    )
