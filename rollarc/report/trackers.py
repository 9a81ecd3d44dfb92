"""Experiment trackers next to ``metrics.jsonl`` and TensorBoard: Weights & Biases and MLflow (``run.trackers``).

Each is an optional extra (``pip install 'rollarc[wandb]'``, ``'rollarc[mlflow]'``), imported only when
named. A named tracker whose package is missing is a one-line :class:`TrackerMissing` at start-up
(:func:`check_trackers`, before Ray starts), naming the extra to install.

Each tracker receives the same numeric metrics as ``metrics.jsonl`` (nested values flattened to
``a/b`` names, as in TensorBoard) at the same step, plus the run name and the whole config. Where they
write comes from each library's own environment variables, never from the config (which holds no
credentials): ``WANDB_MODE=offline``, ``WANDB_DIR``, ``WANDB_API_KEY``; ``MLFLOW_TRACKING_URI`` (for
example ``file:./mlruns``, a local file store).

* W&B: ``wandb.init(project=run.project, name=RUN_NAME, config=CONFIG, dir=RUN_DIR)``, then
  ``run.log(values, step=step)`` and ``run.finish()``.
* MLflow: through ``MlflowClient`` (no global active run): a run named RUN_NAME in the experiment
  ``run.project``, the config as params (flattened, values cut to MLflow's length limit), metrics by
  ``log_batch``, and ``set_terminated`` at the end.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from rollarc.config.io import ConfigError

TrackerName = Literal["wandb", "mlflow"]
PACKAGES: dict[str, str] = {"wandb": "wandb", "mlflow": "mlflow"}  # tracker -> module to import (= the extra)
MAX_PARAM_CHARS = 500  # MLflow's oldest stores limit a param value to 500 characters


class TrackerMissing(ConfigError):
    """``run.trackers`` names a tracker whose package is not installed."""


class Tracker(Protocol):
    def log(self, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def check_trackers(names: list[str], packages: dict[str, str] = PACKAGES) -> None:
    """Every named tracker's package is importable; else one line naming the extra to install."""
    for name in names:
        if importlib.util.find_spec(packages[name]) is None:
            raise TrackerMissing(
                f"run.trackers names {name}, but the {packages[name]} package is not installed; "
                f"install the extra: pip install 'rollarc[{name}]'"
            )


def open_trackers(
    names: list[str], run_dir: Path, run_name: str, project: str, config: dict[str, Any]
) -> list[Tracker]:
    check_trackers(names)
    trackers: list[Tracker] = []
    for name in names:
        if name == "wandb":
            trackers.append(WandbTracker(run_dir, run_name, project, config))
        else:
            trackers.append(MlflowTracker(run_name, project, config))
    return trackers


class WandbTracker:
    def __init__(self, run_dir: Path, run_name: str, project: str, config: dict[str, Any]) -> None:
        wandb = importlib.import_module("wandb")
        self.run = wandb.init(project=project, name=run_name, config=config, dir=str(run_dir))

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    def __init__(self, run_name: str, project: str, config: dict[str, Any]) -> None:
        tracking = importlib.import_module("mlflow.tracking")
        entities = importlib.import_module("mlflow.entities")
        self._metric, self._param = entities.Metric, entities.Param
        self.client = tracking.MlflowClient()
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        params = [self._param(key, str(value)[:MAX_PARAM_CHARS]) for key, value in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self._metric(key, value, now, step) for key, value in values.items()]
        for start in range(0, len(metrics), 1000):  # and at most 1000 metrics
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a/b`` keys (the names TensorBoard and the trackers show)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat
