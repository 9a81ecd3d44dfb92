"""``EngineConfig``: the knobs of one engine instance (a frozen pydantic model, loadable from YAML)."""

from __future__ import annotations

from pydantic import Field

from rollarc.configio import FrozenModel


class EngineConfig(FrozenModel):
    """Sizes and limits of one engine.

    - ``max_num_seqs``: requests decoded together (KV slots). The KV cache is preallocated for
      ``max_num_seqs × max_model_len`` tokens per layer.
    - ``max_model_len``: prompt + generated tokens of one request at most; ``None`` = the model's
      ``max_position_embeddings``.
    - ``prefill_token_budget``: prompt tokens prefilled per engine step (a longer prompt is still
      admitted when it is the only prefill of its step, so nothing starves).
    - ``prefix_cache_tokens``: tokens of KV kept for agentic prefix reuse (0 turns it off).
    - ``num_threads``: torch intra-op threads, set when the engine starts. Torch's thread count is
      process-wide, so it applies to everything else in the process too; ``None`` leaves it alone.
    - ``seed``: seeds the generator of requests that carry no seed of their own.
    - ``kv_cache_max_gb``: refuse to start when the preallocated KV cache would be larger, instead of
      running the machine out of memory (a long-context model's default ``max_model_len`` is large).
    """

    max_num_seqs: int = Field(default=64, ge=1)
    max_model_len: int | None = Field(default=None, ge=2)
    prefill_token_budget: int = Field(default=2048, ge=1)
    prefix_cache_tokens: int = Field(default=65536, ge=0)
    num_threads: int | None = Field(default=1, ge=1)
    seed: int = 0
    kv_cache_max_gb: float = Field(default=4.0, gt=0)
