"""Online task profiles: what each task costs, measured from its own trajectories during the run.

Per task: prompt and generated tokens per turn, turns per trajectory, env-step latency and reward
time, as means and quantiles over a bounded reservoir sample (memory stays flat over a long run).
They are written to ``RUN_DIR/task_profiles.json`` and feed the cost model and the simulator
(``rollarc simulate --from-run RUN_DIR``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rollarc.agent.trajectory import Trajectory

RESERVOIR = 4096


@dataclass
class Reservoir:
    """Uniform sample of at most ``size`` values of a stream (Vitter's algorithm R), plus exact count and sum."""

    size: int = RESERVOIR
    seed: int = 0
    values: list[float] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if len(self.values) < self.size:
            self.values.append(value)
        else:
            j = self._rng.randrange(self.count)
            if j < self.size:
                self.values[j] = value

    def state(self) -> dict[str, Any]:
        """Everything needed to continue the stream exactly (sample, count, sum and the generator), as JSON."""
        version, internal, gauss = self._rng.getstate()
        return {
            "size": self.size,
            "values": list(self.values),
            "count": self.count,
            "total": self.total,
            "rng": [version, list(internal), gauss],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Reservoir:
        reservoir = cls(size=int(state["size"]), values=[float(v) for v in state["values"]])
        reservoir.count = int(state["count"])
        reservoir.total = float(state["total"])
        version, internal, gauss = state["rng"]
        reservoir._rng.setstate((version, tuple(internal), gauss))
        return reservoir

    def summary(self) -> dict[str, float]:
        if not self.values:
            return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "n": 0}
        q = np.quantile(self.values, [0.5, 0.9, 0.99])
        return {
            "mean": self.total / self.count,
            "p50": float(q[0]),
            "p90": float(q[1]),
            "p99": float(q[2]),
            "n": self.count,
        }


FIELDS = (
    "turns",
    "prompt_tokens_per_turn",
    "new_tokens_per_turn",
    "cached_tokens",
    "env_step_s",
    "reward_s",
    "trajectory_s",
)


class TaskProfiler:
    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Reservoir]] = {}
        self.outcomes: dict[str, dict[str, int]] = {}

    def add(self, traj: Trajectory) -> None:
        stats = self.tasks.get(traj.task)
        if stats is None:  # built once per task: seeding seven generators per trajectory showed in the driver's profile
            stats = self.tasks[traj.task] = {name: Reservoir(seed=i) for i, name in enumerate(FIELDS)}
        outcome = self.outcomes.setdefault(traj.task, {"ok": 0, "failed": 0, "success": 0})
        outcome["failed" if traj.status != "ok" else "ok"] += 1
        outcome["success"] += int(traj.success)
        if traj.status != "ok":
            return
        stats["turns"].add(traj.num_turns)
        for n in traj.turn_prompt_tokens:
            stats["prompt_tokens_per_turn"].add(n)
        for n in traj.turn_new_tokens:
            stats["new_tokens_per_turn"].add(n)
        for s in traj.turn_env_s:
            stats["env_step_s"].add(s)
        stats["cached_tokens"].add(traj.cached_tokens)
        if "reward_s" in traj.timings:
            stats["reward_s"].add(traj.timings["reward_s"])
        stats["trajectory_s"].add(traj.timings.get("total_s", 0.0))

    def state(self) -> dict[str, Any]:
        """The profiler as JSON, saved in a checkpoint so a resumed run's profiles cover the whole run."""
        return {
            "tasks": {task: {name: r.state() for name, r in stats.items()} for task, stats in self.tasks.items()},
            "outcomes": {task: dict(outcome) for task, outcome in self.outcomes.items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TaskProfiler:
        profiler = cls()
        profiler.tasks = {
            task: {name: Reservoir.from_state(r) for name, r in stats.items()} for task, stats in state["tasks"].items()
        }
        profiler.outcomes = {task: {k: int(v) for k, v in o.items()} for task, o in state["outcomes"].items()}
        return profiler

    def profiles(self) -> dict[str, Any]:
        return {
            task: {**{name: r.summary() for name, r in stats.items()}, **self.outcomes[task]}
            for task, stats in self.tasks.items()
        }
