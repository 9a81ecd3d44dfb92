"""The reward judge on Ray Serve: scale-up and scale-down observed, batching, retries after a replica dies,
timeouts. One local Ray cluster for the module; each test deploys its own application.

That cluster is the module's own, not the suite's shared one (tests/integration/shared_ray.py): the tests start
Ray Serve applications, whose detached Serve controller would outlive the module on a shared cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
import torch
from ray import serve

from rollarc.agent.runner import RewardFailure
from rollarc.config import ClusterConfig
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rayproc.local_start import init_local_ray
from rollarc.rewards.client import RewardClient
from rollarc.rewards.config import RewardConfig
from rollarc.rewards.deployment import DEPLOYMENT_NAME
from rollarc.rewards.judge import JudgeSpec, ProgressJudge, load_judge, save_judge, tokenizer_fingerprint
from rollarc.rewards.meter import replica_states
from rollarc.rewards.service import RewardBackend, connect

pytestmark = pytest.mark.slow
APP = "reward-test"


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    spec = JudgeSpec(
        vocab_size=len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        context_tokens=16,
        d_model=16,
        heads=2,
        layers=1,
        tokenizer_sha256=tokenizer_fingerprint(tokenizer.get_vocab()),
    )
    return save_judge(ProgressJudge(spec), tmp_path_factory.mktemp("reward") / "judge", {})


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    init_local_ray(
        num_cpus=2,
        resources={"pool_reward": 8, "pool_compute": 2, "pool_cpu": 4},
        include_dashboard=False,
        logging_level="warning",
    )
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(judge_dir: Path, kind: str, replicas: int = 0, **reward: object) -> tuple[RewardBackend, RewardClient]:
    cluster = ClusterConfig(
        pools={"compute": {"count": 2}, "cpu": {"count": 4}, "reward": {"count": 8}},
        roles={"reward": {"pool": "reward", "replicas": replicas, "units": 1}},
    )
    cfg = RewardConfig(kind=kind, app_name=APP, retry_backoff_s=0.05, **reward)
    backend = RewardBackend(cfg, str(judge_dir), cluster).start()
    return backend, connect(backend.client_spec())


def replicas() -> dict[str, int]:
    return replica_states(APP, DEPLOYMENT_NAME)


def wait_until(condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def tokens(i: int) -> list[int]:
    return [10 + (i * 7 + j) % 80 for j in range(5 + i % 9)]


def test_serverless_scales_up_under_load_and_back_to_zero(local_ray, judge_dir):
    backend, client = deploy(
        judge_dir,
        "serverless",
        autoscaling={
            "min_replicas": 0,
            "max_replicas": 2,
            "target_ongoing_requests": 1,
            "upscale_delay_s": 0.0,
            "downscale_delay_s": 0.5,
            "downscale_to_zero_delay_s": 0.5,
            "metrics_interval_s": 0.2,
            "look_back_period_s": 0.4,
        },
        batching={"max_batch_size": 2, "batch_wait_timeout_s": 0.01},
        service_cost={"fixed_s": 0.5},
    )
    try:
        assert replicas() == {}  # min_replicas 0: nothing runs before the first request
        seen: list[int] = []

        async def burst() -> list[float]:
            pending = asyncio.gather(*[client.score_tokens(tokens(i)) for i in range(24)])
            while not pending.done():
                seen.append(replicas().get("RUNNING", 0))
                await asyncio.sleep(0.1)
            return await pending

        scores = asyncio.run(burst())
        assert len(scores) == 24 and all(0.0 <= s <= 1.0 for s in scores)
        assert max(seen) == 2  # scaled up to max_replicas while the burst was queued
        wait_until(lambda: replicas() == {})  # and back to zero once idle
    finally:
        backend.shutdown()


def test_requests_are_batched_and_each_gets_its_own_score(local_ray, judge_dir):
    backend, client = deploy(
        judge_dir, "dedicated", replicas=1, batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.5}
    )
    try:
        sequences = [tokens(i) for i in range(8)]

        async def together() -> list[float]:
            return await asyncio.gather(*[client.score_tokens(s) for s in sequences])

        scores = asyncio.run(together())
        stats = serve.get_deployment_handle(DEPLOYMENT_NAME, APP).stats.remote().result()
        assert stats["batch_sizes"] == {8: 1}  # one forward pass for the eight requests
        expected = load_judge(judge_dir).score(sequences)
        assert scores == pytest.approx(expected, abs=1e-5)  # each caller got its own item's score back
    finally:
        backend.shutdown()


def test_a_replica_that_dies_mid_request_is_retried_and_replaced(local_ray, judge_dir):
    backend, client = deploy(
        judge_dir,
        "dedicated",
        replicas=2,
        batching={"max_batch_size": 1},
        service_cost={"fixed_s": 2.0},
        timeout_s=60.0,
        max_retries=2,
    )
    try:
        handle = serve.get_deployment_handle(DEPLOYMENT_NAME, APP)
        pids: set[int] = set()
        for _ in range(50):
            pids.add(handle.stats.remote().result()["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2
        victim = min(pids)

        async def scenario() -> list[float]:
            pending = asyncio.gather(*[client.score_tokens(tokens(i)) for i in range(4)])
            await asyncio.sleep(0.7)  # every request is now inside a replica's 2-second batch
            os.kill(victim, signal.SIGKILL)
            return await pending

        scores = asyncio.run(scenario())
        assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores)
        assert client.stats.retries >= 1 and client.stats.failures == 0
        wait_until(lambda: replicas().get("RUNNING", 0) == 2)  # the fixed pool is whole again
    finally:
        backend.shutdown()


def test_a_timeout_fails_the_request_and_the_service_goes_on(local_ray, judge_dir):
    backend, patient = deploy(judge_dir, "dedicated", replicas=1, service_cost={"fixed_s": 2.0}, timeout_s=30.0)
    try:
        hasty = connect(dataclasses.replace(backend.client_spec(), timeout_s=0.3))
        with pytest.raises(RewardFailure, match=r"timed out after 0.3 s"):
            asyncio.run(hasty.score_tokens(tokens(1)))
        assert hasty.stats.timeouts == 1
        assert 0.0 <= asyncio.run(patient.score_tokens(tokens(2))) <= 1.0
    finally:
        backend.shutdown()
