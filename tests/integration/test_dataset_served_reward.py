"""Dataset reward functions served on local Ray Serve (``dataset.reward_placement: serverless``): bitwise the
local rewards, a failing function still fails one trajectory with its reason, a lost replica is retried.

It starts one Ray cluster of its own for the module, not the suite's shared one (tests/integration/shared_ray.py):
it starts Ray Serve applications, whose detached Serve controller would outlive the module on a shared cluster."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve

from rollarc.config import Config
from rollarc.config.io import validate
from rollarc.data.env import DatasetEnv
from rollarc.data.reward_deployment import DEPLOYMENT_NAME, app_name
from rollarc.data.reward_fn import RewardFunctionError
from rollarc.envs.registry import make_env
from rollarc.rayproc.local_start import init_local_ray
from rollarc.rewards.dataset_service import start_dataset_rewards
from rollarc.rewards.meter import replica_states

pytestmark = pytest.mark.slow
ANSWERS = ["\\boxed{7}", "7", "\\boxed{8}", "", "the answer is 8", "12/1.5"]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    init_local_ray(
        num_cpus=2,
        resources={"pool_reward": 4, "pool_compute": 2, "pool_cpu": 4},
        include_dashboard=False,
        logging_level="warning",
    )
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def config(tmp_path: Path, placement: str) -> Config:
    rows = [
        {"prompt": f"{i}+7=", "data_source": "arith", "reward_model": {"ground_truth": str(i + 7)}} for i in range(4)
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    reward = [
        {"function": "rollarc.data.math_reward:accuracy"},
        {"function": "byo_rewards:length_trl", "weight": 0.1},
        {"function": "byo_rewards:marked_trl", "weight": 0.3},
    ]
    return validate(
        Config,
        {
            "name": "served",
            "tasks": [{"name": "d", "dataset": {"path": str(data), "reward": reward, "reward_placement": placement}}],
            "cluster": {
                "pools": {"compute": {"count": 2}, "cpu": {"count": 4}, "reward": {"count": 4}},
                "roles": {"reward": {"pool": "reward", "replicas": 0, "units": 1}},
            },
            "reward": {
                "autoscaling": {"min_replicas": 1, "max_replicas": 2},
                "timeout_s": 60.0,
                "max_retries": 2,
                "retry_backoff_s": 0.05,
            },
        },
    )


def env_of(cfg: Config) -> DatasetEnv:
    env = make_env(cfg.tasks[0].env_spec)
    assert isinstance(env.unwrapped, DatasetEnv)
    return env.unwrapped


def play(env: DatasetEnv, seed: int, answer: str) -> tuple[float, list[Any]]:
    env.reset(seed=seed)
    _, reward, _, _, info = env.step(answer)
    return reward, info["scores"]


def test_served_rewards_equal_local_ones_fail_with_reasons_and_survive_a_lost_replica(local_ray, tmp_path):
    served_cfg = config(tmp_path, "serverless")
    apps = start_dataset_rewards(served_cfg)
    assert apps is not None and apps.names == [app_name(served_cfg.tasks[0].dataset)]
    try:
        local, served = env_of(config(tmp_path, "local")), env_of(served_cfg)
        for seed in range(4):
            for answer in ANSWERS:
                want, got = play(local, seed, answer), play(served, seed, answer)
                assert got[0].hex() == want[0].hex() and got[1] == want[1]
        assert served.served is not None and served.served.stats.requests == 4 * len(ANSWERS)

        for env in (local, served):  # the same failure, with the same reason, either way
            env.reset(seed=0)
            with pytest.raises(
                RewardFunctionError, match=r"^reward function byo_rewards:marked_trl raised ZeroDivisionError: boom$"
            ):
                env.step("boom")

        pid = int(play(served, 0, "pid")[1][2])  # the one replica's process (min_replicas: 1, no load)
        assert pid != os.getpid()
        killer = threading.Timer(0.7, os.kill, (pid, signal.SIGKILL))  # inside the 2 s 'slow' call
        killer.start()
        want, got = play(local, 1, "slow 8"), play(served, 1, "slow 8")
        killer.join()
        assert got[0].hex() == want[0].hex() and got[1] == want[1]
        # No trajectory failed: the only failure is the 'boom' above. (Here Serve's router re-sent the request to
        # the replacement replica itself; a loss that surfaces to the caller is retried by ServedRewards, as the
        # unit tests show.)
        assert served.served.stats.failures == 1
        deadline = time.monotonic() + 90
        while replica_states(apps.names[0], DEPLOYMENT_NAME).get("RUNNING", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert replica_states(apps.names[0], DEPLOYMENT_NAME).get("RUNNING", 0) >= 1
    finally:
        apps.shutdown()
