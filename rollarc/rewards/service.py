"""Start the model-based reward service and connect callers to it: the glue the runtime calls.

Driver side, after Ray has started (``Workers``): :func:`start_reward_backend` checks the placement,
trains the judge if its directory is missing (as the SFT warm start is), checks that the judge reads
the policy's tokenizer, and deploys the Serve application (autoscaled for ``serverless``, a fixed pool
for ``dedicated``). Its picklable :meth:`RewardBackend.client_spec` goes to every EnvWorker, where
:func:`connect` turns it into a :class:`~rollarc.rewards.client.RewardClient` over a Serve handle.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.config import ProxyLocation

from rollarc.config.cluster import ClusterConfig
from rollarc.config.io import ConfigError
from rollarc.data.reward_deployment import ERRORS, LOST  # one list of what is retried, for every reward client
from rollarc.rewards.client import RewardClient
from rollarc.rewards.config import RewardConfig, placement_problems
from rollarc.rewards.deployment import DEPLOYMENT_NAME, build_app
from rollarc.rewards.judge import read_meta, tokenizer_fingerprint
from rollarc.rewards.meter import replica_states
from rollarc.rewards.train import policy_tokenizer, train_reward_model

if TYPE_CHECKING:
    from rollarc.config import Config  # type only: the training config is above rewards/


@dataclass(frozen=True)
class RewardClientSpec:
    """What an EnvWorker needs to reach the reward service (picklable)."""

    app_name: str
    deployment: str
    context_tokens: int
    timeout_s: float
    max_retries: int
    backoff_s: float


class RewardBackend:
    """A deployed reward service: its handle spec, live stats, and shutdown."""

    def __init__(self, reward: RewardConfig, model_path: str, cluster: ClusterConfig):
        self.reward = reward
        self.model_path = model_path
        self.cluster = cluster
        self.context_tokens = int(read_meta(model_path)["spec"]["context_tokens"])
        self.owns_serve = False
        self.deploy_s = 0.0

    def start(self) -> RewardBackend:
        """Deploy the application (returns once the initial replicas, if any, are running)."""
        self.owns_serve = not serve.status().applications
        serve.start(proxy_location=ProxyLocation.Disabled, http_options={"host": "127.0.0.1"})
        start = time.perf_counter()
        serve.run(build_app(self.reward, self.model_path, self.cluster), name=self.reward.app_name, route_prefix=None)
        self.deploy_s = time.perf_counter() - start
        return self

    def client_spec(self) -> RewardClientSpec:
        r = self.reward
        return RewardClientSpec(
            app_name=r.app_name,
            deployment=DEPLOYMENT_NAME,
            context_tokens=self.context_tokens,
            timeout_s=r.timeout_s,
            max_retries=r.max_retries,
            backoff_s=r.retry_backoff_s,
        )

    def replicas(self) -> dict[str, int]:
        return replica_states(self.reward.app_name, DEPLOYMENT_NAME)

    def stats(self) -> dict[str, Any]:
        return {
            "kind": self.reward.kind,
            "model_path": self.model_path,
            "replicas": self.replicas(),
            "deploy_s": self.deploy_s,
        }

    def shutdown(self) -> None:
        """Delete the application; stop Serve too when this backend started it."""
        serve.delete(self.reward.app_name)
        if self.owns_serve:
            serve.shutdown()


def start_reward_backend(reward: RewardConfig, cfg: Config, log: Callable[[str], None] | None = None) -> RewardBackend:
    """Check, (train if missing,) and deploy the model-based reward of ``cfg``; raises ConfigError on bad input."""
    log = log or (lambda message: print(message, file=sys.stderr))
    problems = placement_problems(reward, cfg.cluster)
    if problems:
        raise ConfigError("invalid reward placement:\n  " + "\n  ".join(problems))
    model_path = reward.resolved_model_path(cfg.name)
    if not (Path(model_path) / "judge.json").is_file():
        log(f"no reward judge at {model_path}: training it first (rollarc reward train)")
        train_reward_model(cfg, log=log)
    check_tokenizer(model_path, cfg)
    return RewardBackend(reward, model_path, cfg.cluster).start()


def check_tokenizer(model_path: str, cfg: Config) -> None:
    """The judge must have been trained on the token ids this run's policy produces."""

    expected = read_meta(model_path)["spec"].get("tokenizer_sha256", "")
    actual = tokenizer_fingerprint(policy_tokenizer(cfg).get_vocab())
    if expected != actual:
        raise ConfigError(
            f"reward judge {model_path} was trained with another tokenizer than this run's policy; "
            "retrain it with `rollarc reward train CONFIG`"
        )


def connect(spec: RewardClientSpec) -> RewardClient:
    """A client over a Serve handle to the deployed judge (call inside any Ray worker or the driver)."""
    handle = serve.get_deployment_handle(spec.deployment, spec.app_name)

    async def call(tokens: list[int]) -> float:
        response = handle.score.remote(tokens)
        try:
            return await response
        except asyncio.CancelledError:
            response.cancel()
            raise

    return RewardClient(
        call, spec.context_tokens, spec.timeout_s, spec.max_retries, spec.backoff_s, lost=LOST, errors=ERRORS
    )
