"""The reward client without Ray: retries on lost replicas (bounded), timeouts, errors, and isolation."""

from __future__ import annotations

import asyncio
import math

import pytest

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec, RewardFailure
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rewards.client import RewardClient


class Lost(RuntimeError):
    pass


class Broken(RuntimeError):
    pass


class Service:
    """Fails the first ``lose`` calls with Lost, then answers ``value`` after ``delay`` seconds."""

    def __init__(self, lose: int = 0, value: float = 0.75, delay: float = 0.0, error: Exception | None = None):
        self.lose, self.value, self.delay, self.error = lose, value, delay, error
        self.calls: list[list[int]] = []
        self.cancelled = 0

    async def __call__(self, tokens: list[int]) -> float:
        self.calls.append(tokens)
        if len(self.calls) <= self.lose:
            raise Lost("replica died")
        if self.error is not None:
            raise self.error
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.value


def client(service: Service, timeout_s: float = 5.0, max_retries: int = 2) -> RewardClient:
    return RewardClient(
        service,
        context_tokens=4,
        timeout_s=timeout_s,
        max_retries=max_retries,
        backoff_s=0.001,
        lost=(Lost,),
        errors=(Broken,),
    )


def score(c: RewardClient, tokens: list[int] | None = None) -> float:
    return asyncio.run(c.score_tokens(tokens or [1, 2, 3]))


def test_a_score_comes_back():
    service = Service(value=0.25)
    c = client(service)
    assert score(c) == 0.25
    assert (c.stats.requests, c.stats.scored, c.stats.retries) == (1, 1, 0)


def test_lost_replicas_are_retried_up_to_the_bound():
    service = Service(lose=2)
    c = client(service, max_retries=2)
    assert score(c) == 0.75
    assert len(service.calls) == 3 and c.stats.retries == 2

    service = Service(lose=3)
    c = client(service, max_retries=2)
    with pytest.raises(RewardFailure, match="replica lost 3 times, retries exhausted: Lost"):
        score(c)
    assert len(service.calls) == 3 and c.stats.failures == 1


def test_a_slow_service_times_out_and_the_request_is_cancelled():
    service = Service(delay=10.0)
    c = client(service, timeout_s=0.05)
    with pytest.raises(RewardFailure, match=r"timed out after 0.05 s"):
        score(c)
    assert service.cancelled == 1 and c.stats.timeouts == 1


def test_service_errors_and_non_finite_scores_fail():
    with pytest.raises(RewardFailure, match="service error: Broken: bad input"):
        score(client(Service(error=Broken("bad input"))))
    with pytest.raises(RewardFailure, match="non-finite score nan"):
        score(client(Service(value=math.nan)))


RENDERER = ChatRenderer(build_tokenizer())


async def say_up(prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
    ids = RENDERER.encode_reply("U")
    return Completion(cache_key, len(prompt_ids), ids, [0.0] * len(ids), [0] * len(ids), 0, "stop")


def test_a_pending_reward_fails_only_its_trajectory_and_blocks_no_other():
    task = TaskConfig(
        name="scripted",
        env={"entry_point": "runtime_plugins:ScriptedEnv", "kwargs": {"turns": 2}},
        agent=AgentConfig(max_turns=4, max_tokens_per_turn=2),
    )
    finished: list[str] = []

    async def go_client():
        calls = {"n": 0}

        async def service_slow_for_one(tokens: list[int]) -> float:
            calls["n"] += 1
            if calls["n"] == 1:
                await asyncio.sleep(5.0)
            return 0.5

        c = RewardClient(service_slow_for_one, context_tokens=16, timeout_s=0.3, max_retries=0, backoff_s=0.0)
        runner = EpisodeRunner(
            {task.name: task},
            RENDERER,
            say_up,
            SamplingConfig(),
            max_env_threads=2,
            reward_fn=c.score,
            reward_weight=2.0,
        )

        async def one(seed: int):
            traj = await runner.run(EpisodeSpec(f"t{seed}", task.name, seed))
            finished.append(traj.traj_id)
            return traj

        try:
            return await asyncio.gather(*[one(s) for s in (1, 2, 3)])
        finally:
            runner.close()

    results = asyncio.run(go_client())
    failed = [t for t in results if t.status == "failed"]
    ok = [t for t in results if t.status == "ok"]
    assert len(failed) == 1 and failed[0].failure_reason == "reward: timed out after 0.3 s"
    assert len(ok) == 2 and all(t.model_reward == 0.5 and t.reward == pytest.approx(2.0 + 2.0 * 0.5) for t in ok)
    assert finished[-1] == failed[0].traj_id  # the others finished while it was still waiting
