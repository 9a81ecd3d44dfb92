"""When finished trajectories reach the reward service: bursty arrival times, generated or recorded.

**Generated** (:func:`wave_arrivals`): a rollout runs in waves, one per training step, started every
``period_s`` seconds. Each wave starts ``trajectories`` episodes of ``turns`` turns at once; a turn
takes ``generate_s`` of policy time plus one environment step drawn from a latency model (the
``long_tail`` preset: lognormal, median 0.2 s, p99 5 s, 2 % failures). A trajectory reaches the reward
when its last turn ends; one whose env step failed never does. The sum of long-tailed steps makes
each wave a burst (most trajectories end within a few seconds) with a long tail, then a lull while
the trainer works: the load the issue describes.

**Recorded** (:func:`timeline_arrivals`): a run's ``timeline.jsonl``; a trajectory arrives at the end
of its last ``env_step`` span.

:func:`peak_rate` and :func:`mean_rate` size the dedicated pools from the same arrivals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rollarc.envs.latency import LatencyConfig, LatencyModel


def wave_arrivals(
    waves: int,
    trajectories: int,
    turns: int,
    period_s: float,
    latency: LatencyConfig,
    generate_s: float = 0.05,
    seed: int = 0,
) -> np.ndarray:
    """Sorted arrival times (seconds from the first wave's start) of the trajectories that finish."""
    if waves < 1 or trajectories < 1 or turns < 1 or period_s <= 0:
        raise ValueError(
            f"waves, trajectories and turns must be >= 1 and period_s > 0; got {waves}, "
            f"{trajectories}, {turns}, {period_s}"
        )
    rng = np.random.default_rng(seed)
    model = LatencyModel(latency)
    times = []
    for wave in range(waves):
        for _ in range(trajectories):
            draws = [model.sample(rng) for _ in range(turns)]
            if any(failed for _, failed in draws):
                continue
            times.append(wave * period_s + sum(delay for delay, _ in draws) + turns * generate_s)
    return np.sort(np.array(times, dtype=float))


def timeline_arrivals(path: str | Path) -> np.ndarray:
    """Sorted arrival times, from 0, of the trajectories in a run's ``timeline.jsonl``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (a run directory's timeline.jsonl is expected)")
    last_end: dict[str, float] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            span = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not JSON: {err}") from err
        if span.get("kind") == "env_step" and "traj" in span:
            last_end[span["traj"]] = max(last_end.get(span["traj"], -math.inf), float(span["t1"]))
    if not last_end:
        raise ValueError(f"{path} has no env_step spans with a 'traj' field; is it a rollarc timeline?")
    times = np.sort(np.array(list(last_end.values())))
    return times - times[0]


def peak_rate(arrivals: np.ndarray, window_s: float) -> float:
    """The most arrivals in any window of ``window_s`` seconds, per second."""
    if len(arrivals) == 0:
        return 0.0
    ends = np.searchsorted(arrivals, arrivals + window_s, side="left")
    return float((ends - np.arange(len(arrivals))).max()) / window_s


def mean_rate(arrivals: np.ndarray) -> float:
    """Arrivals per second over the span from 0 to the last arrival."""
    if len(arrivals) == 0 or arrivals[-1] <= 0:
        return 0.0
    return len(arrivals) / float(arrivals[-1])


def replicas_for(rate: float, capacity_per_replica: float) -> int:
    """Replicas whose combined throughput covers ``rate`` (at least one)."""
    if capacity_per_replica <= 0:
        raise ValueError(f"capacity_per_replica must be > 0, got {capacity_per_replica}")
    return max(1, math.ceil(rate / capacity_per_replica - 1e-9))
