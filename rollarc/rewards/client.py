"""The caller's side of a model-based reward: one awaitable per finished trajectory, bounded in time.

``RewardClient.score(traj)`` is the EpisodeRunner's ``reward_fn``. It is awaited inside the
trajectory's own asyncio task, so a pending score never blocks other trajectories. Failure policy:

* the replica serving a request died (``lost`` errors, e.g. Ray's ``RayActorError``): retry, at most
  ``max_retries`` times, with exponential back-off;
* no answer within ``timeout_s`` (the budget of the whole call, retries included): the trajectory
  fails with ``reward: timed out after ...``; the run goes on;
* the service raised (``errors``), or answered with a non-finite score: the trajectory fails with
  that reason.

Every outcome is counted in ``stats``. The transport (``call``) is injected, so this logic is tested
without Ray, and the Serve handle is only one such transport.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rollarc.agent.runner import RewardFailure
from rollarc.agent.trajectory import Trajectory
from rollarc.rewards.inputs import reward_tokens

Call = Callable[[list[int]], Awaitable[float]]


@dataclass
class ClientStats:
    requests: int = 0
    scored: int = 0
    retries: int = 0
    timeouts: int = 0
    failures: int = 0
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))  # the most recent ones


class RewardClient:
    def __init__(
        self,
        call: Call,
        context_tokens: int,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        lost: tuple[type[BaseException], ...] = (),
        errors: tuple[type[BaseException], ...] = (),
    ):
        self._call = call
        self.context_tokens = context_tokens
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.lost = lost
        self.errors = errors
        self.stats = ClientStats()

    async def score(self, traj: Trajectory) -> float:
        """The model's score of a finished trajectory; raises RewardFailure (which fails that trajectory only)."""
        return await self.score_tokens(reward_tokens(traj, self.context_tokens))

    async def score_tokens(self, tokens: list[int]) -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + self.timeout_s
        self.stats.requests += 1
        attempt = 0
        while True:
            try:
                value = await asyncio.wait_for(self._call(tokens), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                self.stats.timeouts += 1
                raise RewardFailure(
                    f"timed out after {self.timeout_s:g} s" + (f" ({attempt} retries)" if attempt else "")
                ) from None
            except self.lost as err:
                if attempt >= self.max_retries:
                    self.stats.failures += 1
                    raise RewardFailure(
                        f"replica lost {attempt + 1} times, retries exhausted: {type(err).__name__}"
                    ) from err
                attempt += 1
                self.stats.retries += 1
                await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), max(deadline - loop.time(), 0.0)))
                continue
            except self.errors as err:
                self.stats.failures += 1
                raise RewardFailure(f"service error: {type(err).__name__}: {str(err)[:200]}") from err
            value = float(value)
            if not math.isfinite(value):
                self.stats.failures += 1
                raise RewardFailure(f"non-finite score {value}")
            self.stats.scored += 1
            self.stats.latencies_s.append(loop.time() - start)
            return value
