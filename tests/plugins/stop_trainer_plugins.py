"""An env that makes the trainer hang (alive, not dead) once training starts, for the deadline test.

It hands the TrainWorker a call that never returns (``__ray_call__`` with an hour's sleep): the actor runs
one call at a time, so every later call (the training step, ``drain_spans``) waits behind it, while its
process stays up and its gRPC server answers, as with a deadlocked step. (SIGSTOP on the process is not
that: a stopped process answers no connection either, and Ray reports a caller's first call to it as
``ActorUnavailableError`` after its ~20 s connection timeout, which the controller treats as a lost trainer.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray
from runtime_plugins import ScriptedEnv

TRAINER = "train-0"  # Workers names the single TrainWorker so
FOREVER_S = 3600.0


STARTED_WAIT_S = 120.0  # bounded: the trainer runs the hang before this reset returns


def _hang(actor: Any, started: str) -> None:
    Path(started).write_text("hanging")
    time.sleep(FOREVER_S)


class StopTrainerEnv(ScriptedEnv):
    """``ScriptedEnv`` whose first reset on a training seed (below ``below_seed``) in a Ray worker makes the
    trainer hang, and writes ``marker`` so the test knows it did."""

    def __init__(self, marker: str, below_seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker = Path(marker)
        self.below_seed = below_seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if ray.is_initialized() and seed is not None and seed < self.below_seed and not self.marker.exists():
            self.marker.write_text("hung")
            started = self.marker.with_name(self.marker.name + ".started")
            ray.get_actor(TRAINER).__ray_call__.remote(_hang, str(started))  # never waited for: it never returns
            # Wait until the trainer runs it: calls from different callers are not ordered, so without this the
            # controller's train_step of step 1 could reach the trainer first under load (CI once: step 2 hung).
            deadline = time.monotonic() + STARTED_WAIT_S
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().reset(seed=seed, options=options)
