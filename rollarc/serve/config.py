"""The ``rollout:`` section of the training config: which backend generates the rollout turns.

``builtin`` runs rollarc's engine in RolloutWorker actors (``cluster.roles.rollout``). ``vllm`` runs vLLM's
async engine in process in the same actors' place (``runtime/vllm_replica.py``), its weights updated in place.
``openai`` sends every turn to OpenAI-compatible completions servers (``rollarc serve``, or a server with the
same API) and hands new weights to them as HF checkpoints on a shared directory plus a reload call.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rollarc.config.io import FrozenModel


class OpenAIBackendConfig(FrozenModel):
    """Where the completions servers are and how weights reach them."""

    base_urls: list[str] = Field(
        default_factory=list,
        description="server roots, e.g. http://127.0.0.1:8000 (one router replica each; /v1/completions is appended)",
    )
    model: str = Field("rollarc", description="the `model` field sent with every request (the served model name)")
    reload_path: str = Field(
        "/update_weights_from_disk",
        description="POST endpoint that loads the HF checkpoint "
        "at `model_path` (SGLang's name; rollarc serve also accepts /reload)",
    )
    checkpoint_dir: str = Field(
        "artifacts/openai_handoff/{name}",
        description="directory every server can read: "
        "each new version is written here as an HF checkpoint before the reload call "
        "({name} is the run name)",
    )
    timeout_s: float = Field(120.0, gt=0.0, description="seconds one completion request may take before the turn fails")
    chunk_timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="seconds a turn's stream may stay silent (the wait for its first token included) before the "
        "turn fails; timeout_s still bounds the whole turn",
    )
    reload_timeout_s: float = Field(
        300.0, gt=0.0, description="seconds one reload call may take before the weight sync fails"
    )
    max_concurrent_requests: int = Field(
        64, ge=1, description="requests in flight to one server at most (also the router's capacity for it)"
    )
    api_key_env: str | None = Field(
        "ROLLARC_API_KEY",
        description="environment variable, read in each replica's process, holding the servers' API key "
        "(rollarc serve --api-key), sent as 'Authorization: Bearer KEY'; unset or empty variable, or null: no header",
    )

    @field_validator("base_urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"base_urls must start with http:// or https://, got {bad}")
        return [u.rstrip("/") for u in urls]

    @field_validator("reload_path")
    @classmethod
    def _absolute_path(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"reload_path must start with '/', got {path!r}")
        return path


class VLLMBackendConfig(FrozenModel):
    """How each rollout replica builds its in-process vLLM engine (docs/gpu.md)."""

    kv_cache_mb: int = Field(
        256, ge=16, description="KV cache of one replica in MiB (vLLM's kv_cache_memory_bytes; on a GPU, its memory)"
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="longest sequence (prompt + output) one request may hold (None: engine.max_model_len, "
        "else model.max_position_embeddings)",
    )
    enforce_eager: bool = Field(
        True, description="no CUDA graphs (required on the CPU; on a GPU false captures graphs at start-up)"
    )
    cpu_threads_bind: str = Field(
        "nobind",
        description="vLLM's VLLM_CPU_OMP_THREADS_BIND on the CPU backend: nobind leaves threads to the role's "
        "`threads` (its default, auto, pins one thread per core of the machine)",
    )
    start_timeout_s: float = Field(
        600.0, gt=0.0, description="seconds a replica's engine may take to start before the run fails"
    )


class RolloutConfig(FrozenModel):
    backend: Literal["builtin", "vllm", "openai"] = Field(
        "builtin",
        description="builtin: rollarc's engine in RolloutWorker actors; vllm: vLLM's engine in those actors' place, "
        "weights updated in place; openai: OpenAI-compatible servers",
    )
    vllm: VLLMBackendConfig = Field(default_factory=VLLMBackendConfig, description="settings of the vllm backend")
    openai: OpenAIBackendConfig = Field(
        default_factory=OpenAIBackendConfig, description="settings of the openai backend"
    )

    @model_validator(mode="after")
    def _openai_needs_servers(self) -> RolloutConfig:
        if self.backend == "openai" and not self.openai.base_urls:
            raise ValueError(
                "rollout.openai.base_urls is empty: list at least one server "
                "(e.g. http://127.0.0.1:8000, started with `rollarc serve MODEL_DIR`)"
            )
        return self
