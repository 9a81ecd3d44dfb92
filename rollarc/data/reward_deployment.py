"""Dataset reward functions as a Ray Serve deployment (``dataset.reward_placement: serverless``): the replica and its callers.

Why: reward functions are stateless, so they may run serverless (statefulness-aware placement) — a slow
verifier, or one that needs an accelerator, then scales on its own pool instead of occupying env-worker
threads. The driver deploys it (:mod:`rollarc.rewards.dataset_service`, sized and placed as the
``serverless`` judge is); env workers call it through :func:`connect`.

One application per distinct list of reward functions, named from a digest of it (:func:`app_name`),
so the driver that deploys it and the :class:`~rollarc.data.env.DatasetEnv` that calls it agree on the
name from the dataset config alone. Each replica imports the functions once and scores one answer per
request (rollarc scores each trajectory as it finishes), answering an
:class:`~rollarc.data.reward_outcome.Outcome`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import RayServeException, ReplicaUnavailableError

from rollarc.data.config import DatasetConfig, RewardFunctionConfig
from rollarc.data.reward_fn import Answer, load_reward_function
from rollarc.data.reward_outcome import Outcome, score_answer
from rollarc.data.served_client import ServedRewards, ServedSettings

DEPLOYMENT_NAME = "DatasetReward"
APP_PREFIX = "rollarc-dataset-reward"
LOST = (RayActorError, ReplicaUnavailableError)  # the replica went away: worth a retry (the judge's client too)
ERRORS = (RayTaskError, RayServeException)  # the service answered with an error: fail the trajectory


def app_name(dataset: DatasetConfig) -> str:
    """The Serve application serving ``dataset.reward``: the same name wherever it is computed."""
    functions = json.dumps([spec.model_dump() for spec in dataset.reward], sort_keys=True)
    return f"{APP_PREFIX}-{hashlib.sha256(functions.encode()).hexdigest()[:12]}"


class DatasetReward:
    """One replica: the reward functions imported once, each request one answer."""

    def __init__(self, functions: list[dict[str, Any]], threads: int, settings: ServedSettings):
        torch.set_num_threads(threads)
        self.functions = [load_reward_function(RewardFunctionConfig(**spec)) for spec in functions]
        self._settings = settings

    def score(self, answer: Answer) -> Outcome:
        return score_answer(self.functions, answer)

    def settings(self) -> ServedSettings:
        """How callers retry: the driver's ``reward:`` section, so env workers need no copy of it."""
        return self._settings


def connect(dataset: DatasetConfig) -> ServedRewards:
    """A blocking client of ``dataset``'s served functions (call from a thread without an event loop)."""
    handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name(dataset))
    settings: ServedSettings = handle.settings.remote().result()

    def call(answer: Answer, seconds: float) -> Outcome:
        return handle.score.remote(answer).result(timeout_s=seconds)

    return ServedRewards(call, settings, lost=LOST, errors=ERRORS)
