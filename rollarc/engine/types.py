"""The plain data objects that cross the engine's boundary: what a caller asks for, what it gets back.

``SamplingParams`` is validated when it is built, so a bad value fails in the caller's frame with the
field's name instead of deep inside a decode step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded.

    - ``temperature`` 0 means greedy (argmax); otherwise tokens are sampled from softmax(logits / T).
    - ``top_k`` 0 and ``top_p`` 1.0 turn those filters off.
    - ``max_tokens``: generated tokens at most (finish_reason "length").
    - ``stop_token_ids``: finish after generating one of these (the token is kept in the output).
      The model's EOS ids are added unless ``ignore_eos``.
    - ``stop``: finish once the decoded output contains one of these strings (needs an engine built with
      a tokenizer); the token that completes the string is kept in the output.
    - ``seed``: a request with a seed draws from its own generator, so its samples do not depend on
      what else is in the batch.
    - ``skip_draws``: the tokens this turn generated before it was interrupted (they are now the end of the
      prompt); a seeded generator skips that many draws, so a resumed turn draws what it would have drawn
      uninterrupted. It rides in the params so that every backend and the router carry it unchanged.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    skip_draws: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", stop)
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(
                f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {self.top_k!r}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.skip_draws < 0:
            raise ValueError(f"SamplingParams.skip_draws must be >= 0, got {self.skip_draws!r}")
        if any(not s for s in stop):
            raise ValueError(f"SamplingParams.stop must not contain empty strings, got {stop!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Completion:
    """A finished request: its tokens, the log-prob and weight version of each, and why it ended.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the distribution it was sampled
    from (see ``rollarc.engine.sampling``). ``token_versions[i]`` is the engine's weight version when
    ``token_ids[i]`` was sampled; ``version`` is the oldest of them (the current version if there are
    none), which is what staleness is measured from. Times are ``time.perf_counter()`` seconds.
    """

    request_id: str
    prompt_len: int
    token_ids: list[int]
    logprobs: list[float]
    token_versions: list[int]
    version: int
    finish_reason: FinishReason
    error: str | None = None
    stop_reason: int | str | None = None
    cached_prompt_tokens: int = 0
    arrival_time: float = 0.0
    first_token_time: float | None = None
    finish_time: float = 0.0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time


class EngineDeadError(RuntimeError):
    """The engine's loop thread is not running (shut down, or it failed: see ``__cause__``).

    Here, beside the request types, so that callers that only catch it (the router) need not import the engine."""
