"""The engine's mutable record of one request, from arrival to finish."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from rollarc.engine.prefix_cache import CachedPrefix
from rollarc.engine.types import Completion, FinishReason, SamplingParams


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    cache_key: Hashable | None
    arrival_time: float
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    slot: int | None = None
    num_computed: int = 0  # tokens whose K/V are in the cache (positions 0 .. num_computed-1)
    cached_prompt_tokens: int = 0
    reused_prefix: CachedPrefix | None = None  # set by the scheduler on admission, consumed by the engine
    first_token_time: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def last_token(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    def completion(
        self,
        finish_reason: FinishReason,
        version: int,
        finish_time: float,
        error: str | None = None,
        stop_reason: int | str | None = None,
    ) -> Completion:
        return Completion(
            request_id=self.request_id,
            prompt_len=len(self.prompt_ids),
            token_ids=list(self.output_ids),
            logprobs=list(self.logprobs),
            token_versions=list(self.token_versions),
            version=min(self.token_versions) if self.token_versions else version,
            finish_reason=finish_reason,
            error=error,
            stop_reason=stop_reason,
            cached_prompt_tokens=self.cached_prompt_tokens,
            arrival_time=self.arrival_time,
            first_token_time=self.first_token_time,
            finish_time=finish_time,
        )
