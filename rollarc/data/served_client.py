"""The env worker's side of served reward functions: one blocking call per answer, retried after a lost replica.

Why blocking: :meth:`DatasetEnv.step` runs in the env worker's thread pool (no event loop there), and its
step timeout already bounds it, so the asynchronous :class:`~rollarc.rewards.client.RewardClient` does not
fit. The failure policy is that client's, with the same ``reward:`` settings:

* the replica serving the request died (``lost``, e.g. Ray's ``RayActorError``): retry, at most
  ``max_retries`` times, with exponential back-off from ``backoff_s``;
* no answer within ``timeout_s`` (the budget of the whole call, retries included), or the service
  raised (``errors``): that trajectory fails;
* a reward function raised or returned a non-number: that trajectory fails with the function's reason.

Every failure is a :class:`~rollarc.data.reward_fn.RewardFunctionError`, which the env worker counts as
``env_step_error:RewardFunctionError`` with the reason, exactly as for functions run in place. The
transport (``call``) is injected, so this logic is tested without Ray.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rollarc.data.reward_fn import Answer, RewardFunctionError
from rollarc.data.reward_outcome import Outcome, scores_of

Call = Callable[[Answer, float], Outcome]  # (answer, seconds left) -> outcome; raises TimeoutError past them


@dataclass(frozen=True)
class ServedSettings:
    """The ``reward:`` settings a client needs (picklable; the deployment hands them to its callers)."""

    timeout_s: float
    max_retries: int
    backoff_s: float


@dataclass
class ServedStats:
    requests: int = 0
    retries: int = 0
    failures: int = 0


class ServedRewards:
    """Scores answers through ``call``; see the module docstring for the failure policy."""

    def __init__(
        self,
        call: Call,
        settings: ServedSettings,
        lost: tuple[type[BaseException], ...] = (),
        errors: tuple[type[BaseException], ...] = (),
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._call = call
        self.settings = settings
        self.lost = lost
        self.errors = errors
        self._sleep = sleep
        self._clock = clock
        self.stats = ServedStats()

    def scores(self, answer: Answer) -> list[float | None]:
        """Each function's score of ``answer``; raises RewardFunctionError (that trajectory fails) on any failure."""
        s = self.settings
        deadline = self._clock() + s.timeout_s
        self.stats.requests += 1
        attempt = 0
        while True:
            try:
                outcome = self._call(answer, max(deadline - self._clock(), 0.0))
            except TimeoutError:
                self.stats.failures += 1
                raise RewardFunctionError(
                    f"served reward timed out after {s.timeout_s:g} s" + (f" ({attempt} retries)" if attempt else "")
                ) from None
            except self.lost as err:
                if attempt >= s.max_retries:
                    self.stats.failures += 1
                    raise RewardFunctionError(
                        f"served reward: replica lost {attempt + 1} times, retries exhausted: {type(err).__name__}"
                    ) from err
                attempt += 1
                self.stats.retries += 1
                self._sleep(min(s.backoff_s * 2 ** (attempt - 1), max(deadline - self._clock(), 0.0)))
                continue
            except self.errors as err:
                self.stats.failures += 1
                raise RewardFunctionError(
                    f"served reward: service error: {type(err).__name__}: {str(err)[:200]}"
                ) from err
            if outcome.error is not None:
                self.stats.failures += 1
            return scores_of(outcome)
