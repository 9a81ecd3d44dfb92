"""Observe a reward deployment's replicas over time: counts by state, and replica-seconds (the cost).

The count comes from the Serve controller (``serve.status()``), the same view the autoscaler acts on.
Every replica that holds resources counts (starting, running or stopping), so a replica costs from
the moment it is being started until it is gone. A background thread samples the count; the cost is
the integral of that step function (:func:`integrate_steps`).
"""

from __future__ import annotations

import threading
import time


def replica_states(app_name: str, deployment: str) -> dict[str, int]:
    """Replicas of ``deployment`` by state, e.g. ``{"RUNNING": 2, "STARTING": 1}`` ({} when none or no app)."""
    from ray import serve  # deferred: Ray Serve is heavy; the pure integration below is used without Ray

    app = serve.status().applications.get(app_name)
    if app is None or deployment not in app.deployments:
        return {}
    return {
        str(getattr(state, "value", state)): int(n) for state, n in app.deployments[deployment].replica_states.items()
    }


def integrate_steps(samples: list[tuple[float, int]], t0: float, t1: float) -> float:
    """Integral over [t0, t1] of the step function that holds each sample's value until the next sample.

    Before the first sample the function is taken to be the first sample's value.
    """
    if t1 <= t0 or not samples:
        return 0.0
    total = 0.0
    for index, (time_i, value) in enumerate(samples):
        start = t0 if index == 0 else max(time_i, t0)
        end = samples[index + 1][0] if index + 1 < len(samples) else t1
        end = min(end, t1)
        if end > start:
            total += value * (end - start)
    return total


class ReplicaMeter:
    """Samples the replica count of one deployment every ``interval_s`` seconds in a daemon thread."""

    def __init__(self, app_name: str, deployment: str, interval_s: float = 0.1):
        self.app_name = app_name
        self.deployment = deployment
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []  # (time.perf_counter(), replicas holding resources)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        count = sum(replica_states(self.app_name, self.deployment).values())
        self.samples.append((time.perf_counter(), count))
        return count

    def start(self) -> ReplicaMeter:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="replica-meter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def replica_seconds(self, t0: float, t1: float) -> float:
        return integrate_steps(self.samples, t0, t1)

    @property
    def peak(self) -> int:
        return max((n for _, n in self.samples), default=0)
