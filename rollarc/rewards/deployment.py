"""The reward judge as a Ray Serve deployment: batched with ``@serve.batch``, autoscaled or fixed.

Both model-based kinds run this one deployment, so they batch and route requests identically and
differ only in sizing: ``serverless`` gets Serve's ``autoscaling_config`` (``min_replicas`` may be 0),
``dedicated`` a fixed ``num_replicas`` (a fixed pool of Ray actors: Serve replicas are actors). The
benchmark therefore compares autoscaling with fixed pools and nothing else. (``@serve.batch`` only
works inside a Serve replica, which is a second reason the fixed pool is a Serve deployment too.)

Replicas are placed like every rollarc role: on ``cluster.roles.reward.pool`` with ``units`` of it and
pinned torch threads (``torch.set_num_threads`` in the replica, not a ``runtime_env``: a runtime
environment would make Ray start a fresh worker process for every replica, adding to each cold start).
There is no HTTP route: callers use a ``DeploymentHandle``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

import torch
from ray import serve
from ray.serve.deployment import Application

from rollarc.config.cluster import ClusterConfig
from rollarc.rayproc.placement import actor_options
from rollarc.rewards.config import RewardConfig, ServiceCostConfig
from rollarc.rewards.judge import load_judge

DEPLOYMENT_NAME = "RewardJudge"
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}


class RewardJudge:
    """One replica: the judge loaded once, scoring whatever batch ``@serve.batch`` gathered."""

    def __init__(
        self,
        model_path: str,
        threads: int,
        max_batch_size: int,
        batch_wait_timeout_s: float,
        service_cost: dict[str, float],
    ):
        start = time.perf_counter()
        torch.set_num_threads(threads)
        self.judge = load_judge(model_path)
        self.cost = ServiceCostConfig(**service_cost)
        self.score_batch.set_max_batch_size(max_batch_size)  # type: ignore[attr-defined]  # added by @serve.batch
        self.score_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)  # type: ignore[attr-defined]  # added by @serve.batch
        self.batch_sizes: Counter[int] = Counter()
        self.started_at = time.time()
        self.init_s = time.perf_counter() - start

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)  # real values are set in __init__ from the config
    async def score_batch(self, sequences: list[list[int]]) -> list[float]:
        scores = self.judge.score(sequences)
        delay = self.cost.seconds(len(sequences))
        if delay > 0:
            await asyncio.sleep(delay)
        self.batch_sizes[len(sequences)] += 1
        return scores

    async def score(self, tokens: list[int]) -> float:
        return await self.score_batch(tokens)

    def stats(self) -> dict[str, Any]:
        """This replica's identity, start time, load time and the sizes of the batches it scored."""
        return {
            "replica": serve.get_replica_context().replica_id.unique_id,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "init_s": self.init_s,
            "batch_sizes": dict(self.batch_sizes),
        }


def build_app(reward: RewardConfig, model_path: str, cluster: ClusterConfig) -> Application:
    """The Serve application for ``reward`` placed on ``cluster``."""
    role = cluster.roles.reward
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": reward.batching.ongoing_limit,
        "ray_actor_options": {k: v for k, v in actor_options(cluster, role).items() if k != "runtime_env"},
        "graceful_shutdown_wait_loop_s": 0.2,
        "graceful_shutdown_timeout_s": 5.0,
        "logging_config": QUIET_LOGS,
    }
    if reward.kind == "serverless":
        options["autoscaling_config"] = reward.autoscaling.serve_options()
    elif reward.kind == "dedicated":
        options["num_replicas"] = role.replicas
    else:
        raise ValueError(f"reward.kind {reward.kind!r} has no service (only serverless and dedicated do)")
    deployment = serve.deployment(RewardJudge).options(**options)  # type: ignore[attr-defined]  # Serve stub
    return deployment.bind(
        model_path,
        role.threads,
        reward.batching.max_batch_size,
        reward.batching.batch_wait_timeout_s,
        reward.service_cost.model_dump(),
    )
