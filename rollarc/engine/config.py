"""``EngineConfig``: the knobs of one engine instance (a frozen pydantic model, loadable from YAML)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollarc.config.io import FrozenModel


class EngineConfig(FrozenModel):
    """Sizes and limits of one engine instance.

    The KV cache holds ``slots x max_model_len`` tokens, ``slots = min(max_num_seqs, budget // (max_model_len x
    bytes per token))``; the budget is ``kv_cache_gb`` or ``kv_cache_memory_fraction`` of free device memory
    (see ``rollarc.engine.kv_cache``).
    """

    max_num_seqs: int = Field(
        default=64,
        ge=1,
        description="requests decoded together at most (KV "
        "slots); fewer slots when the KV budget holds fewer whole "
        "requests of max_model_len tokens",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=2,
        description="prompt + generated tokens of one request at most (null: the model's max_position_embeddings)",
    )
    prefill_token_budget: int = Field(
        default=2048,
        ge=1,
        description="prompt tokens prefilled per engine step (a "
        "longer prompt is still admitted when it is "
        "its step's only prefill, so nothing starves)",
    )
    prefix_cache_tokens: int = Field(
        default=65536, ge=0, description="tokens of KV kept for agentic prefix reuse across turns (0: off)"
    )
    num_threads: int | None = Field(
        default=1,
        ge=1,
        description="torch intra-op threads, set when the engine "
        "starts; process-wide, so it applies to everything "
        "else in the process too (null: leave it alone). A "
        "rollout replica uses its role's `threads` instead",
    )
    seed: int = Field(0, description="seeds the generator of requests that carry no seed of their own")
    kv_cache_gb: float | None = Field(
        default=None, gt=0, description="absolute KV cache budget in GB (overrides kv_cache_memory_fraction)"
    )
    kv_cache_memory_fraction: float = Field(
        default=0.5,
        gt=0,
        le=0.95,
        description="KV cache budget as a fraction "
        "of the memory free on the "
        "engine's device when it starts "
        "(CUDA: mem_get_info; CPU: "
        "available RAM)",
    )
    dtype: Literal["float32", "bfloat16"] | None = Field(
        default=None, description="engine weights and KV cache dtype (null: model.dtype); log-probs are float32 always"
    )
