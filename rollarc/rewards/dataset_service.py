"""Deploy a run's served dataset reward functions (``dataset.reward_placement: serverless``), driver side.

Why here and not in ``rollarc.data``: sizing and placement are the ``serverless`` judge's —
``reward.autoscaling`` (may scale to zero), ``cluster.roles.reward`` (pool, units, threads),
``reward.batching.ongoing_limit`` requests per replica, the same placement check — and callers retry per
``reward.timeout_s``, ``max_retries`` and ``retry_backoff_s``, which the deployment hands them. The
replica itself and the callers' side live in :mod:`rollarc.data.reward_deployment`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.config import ProxyLocation
from ray.serve.deployment import Application

from rollarc.config.io import ConfigError
from rollarc.data.config import DatasetConfig
from rollarc.data.reward_deployment import DEPLOYMENT_NAME, DatasetReward, app_name
from rollarc.data.served_client import ServedSettings
from rollarc.rayproc.placement import actor_options
from rollarc.rewards.config import placement_problems
from rollarc.rewards.deployment import QUIET_LOGS

if TYPE_CHECKING:
    from rollarc.config import Config  # type only: the training config is above rewards/


def build_app(dataset: DatasetConfig, cfg: Config) -> Application:
    """The Serve application for ``dataset.reward``, sized by ``cfg.reward`` and placed on ``cluster.roles.reward``."""
    reward, role = cfg.reward, cfg.cluster.roles.reward
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": reward.batching.ongoing_limit,
        "ray_actor_options": {k: v for k, v in actor_options(cfg.cluster, role).items() if k != "runtime_env"},
        "autoscaling_config": reward.autoscaling.serve_options(),
        "graceful_shutdown_wait_loop_s": 0.2,
        "graceful_shutdown_timeout_s": 5.0,
        "logging_config": QUIET_LOGS,
    }
    deployment = serve.deployment(DatasetReward).options(**options)  # type: ignore[attr-defined]  # Serve stub
    settings = ServedSettings(reward.timeout_s, reward.max_retries, reward.retry_backoff_s)
    return deployment.bind([spec.model_dump() for spec in dataset.reward], role.threads, settings)


class DatasetRewardApps:
    """The deployed applications of a run's served dataset rewards, and their shutdown."""

    def __init__(self, names: list[str], owns_serve: bool):
        self.names = names
        self.owns_serve = owns_serve

    def shutdown(self) -> None:
        """Delete the applications; stop Serve too when nothing else was running on it at start."""
        for name in self.names:
            serve.delete(name)
        if self.owns_serve:
            serve.shutdown()


def served_datasets(cfg: Config) -> dict[str, DatasetConfig]:
    """Application name -> a dataset config whose reward functions it serves (tasks sharing functions share one)."""
    return {
        app_name(task.dataset): task.dataset
        for task in cfg.tasks
        if task.dataset is not None and task.dataset.reward_placement == "serverless"
    }


def start_dataset_rewards(cfg: Config, log: Callable[[str], None] | None = None) -> DatasetRewardApps | None:
    """Deploy the served reward functions of ``cfg``'s dataset tasks (None when no task serves them)."""
    datasets = served_datasets(cfg)
    if not datasets:
        return None
    log = log or (lambda message: print(message, file=sys.stderr))
    sizing = cfg.reward.model_copy(update={"kind": "serverless"})  # sized and placed as the serverless judge is
    problems = placement_problems(sizing, cfg.cluster)
    if problems:
        raise ConfigError(
            "invalid placement of served dataset rewards (dataset.reward_placement):\n  " + "\n  ".join(problems)
        )
    owns_serve = not serve.status().applications
    serve.start(proxy_location=ProxyLocation.Disabled, http_options={"host": "127.0.0.1"})
    for name, dataset in datasets.items():
        log(f"serving reward functions {[s.function for s in dataset.reward]} as Serve application {name}")
        serve.run(build_app(dataset, cfg), name=name, route_prefix=None)
    return DatasetRewardApps(list(datasets), owns_serve)
