"""``EngineConfig``: the knobs of one engine instance (a frozen pydantic model, loadable from YAML)."""

from __future__ import annotations

from pydantic import Field

from rollarc.configio import FrozenModel


class EngineConfig(FrozenModel):
    """Sizes and limits of one engine instance (the KV cache is preallocated for max_num_seqs x max_model_len)."""

    max_num_seqs: int = Field(default=64, ge=1, description="requests decoded together (KV slots); the KV cache is "
                                                           "preallocated for max_num_seqs x max_model_len tokens per "
                                                           "layer")
    max_model_len: int | None = Field(default=None, ge=2, description="prompt + generated tokens of one request at "
                                                                      "most (null: the model's "
                                                                      "max_position_embeddings)")
    prefill_token_budget: int = Field(default=2048, ge=1, description="prompt tokens prefilled per engine step (a "
                                                                      "longer prompt is still admitted when it is "
                                                                      "its step's only prefill, so nothing starves)")
    prefix_cache_tokens: int = Field(default=65536, ge=0, description="tokens of KV kept for agentic prefix reuse "
                                                                      "across turns (0: off)")
    num_threads: int | None = Field(default=1, ge=1, description="torch intra-op threads, set when the engine "
                                                                 "starts; process-wide, so it applies to everything "
                                                                 "else in the process too (null: leave it alone). A "
                                                                 "rollout replica uses its role's `threads` instead")
    seed: int = Field(0, description="seeds the generator of requests that carry no seed of their own")
    kv_cache_max_gb: float = Field(default=4.0, gt=0, description="refuse to start when the preallocated KV cache "
                                                                  "would be larger, instead of running the machine "
                                                                  "out of memory (a long-context model's default "
                                                                  "max_model_len is large)")
