"""The ``model:`` section: the starting policy (a checkpoint or a preset) and its optional LoRA adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollarc.config.io import FrozenModel


class LoraConfig(FrozenModel):
    """Train LoRA adapters (``peft``) instead of every weight (``model.lora``; docs/bring-your-own.md).

    The trainer wraps the policy with ``peft.get_peft_model`` and optimises only the adapter matrices; the KL
    reference is the same model with its adapters disabled, so no second copy is held. Weight sync sends only
    the adapter tensors; a built-in replica merges them into its base weights (``rollarc.sync.lora``), a vLLM
    replica applies them unmerged as a ``LoRARequest`` (``rollarc.sync.lora_dir``);
    checkpoints hold the adapter in PEFT's format (``adapter/``) next to the unchanged base (``policy/``).
    """

    r: int = Field(8, ge=1, le=4096, description="rank of every adapter (the inner width of B @ A)")
    alpha: float = Field(
        16.0, gt=0.0, description="scaling numerator: the update added to a weight is (alpha / r) * B @ A"
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="dropout on the adapter's input while training (rollout replicas run the merged weights, "
        "without dropout)",
    )
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="names (last path component) of the linear layers that get an adapter; one that matches "
        "no module of the policy is an error at start-up",
    )

    @property
    def scaling(self) -> float:
        """What peft multiplies B @ A by (``lora_alpha / r``, no rsLoRA)."""
        return self.alpha / self.r


class ModelConfig(FrozenModel):
    """Where the policy starts: an HF-format directory, or a fresh preset (trained by SFT first).

    ``device`` and ``dtype`` apply to the roles that hold the model (train, rollout), resolved inside
    each actor (see ``rollarc.models.device``). With ``dtype: bfloat16`` the engine holds bf16 weights
    and KV (``engine.dtype`` overrides), and training keeps float32 master weights and optimiser state
    while its forward passes run under bf16 autocast (see ``rollarc.train.policy_trainer``).
    """

    path: str | None = Field(
        None,
        description="HF-format directory of the starting policy (weights, tokenizer, "
        "chat template); null: build `preset` and warm-start it by SFT",
    )
    preset: Literal["nano", "tiny", "small"] = Field(
        "tiny", description="size of the fresh Llama-architecture policy built when `path` is null"
    )
    max_position_embeddings: int = Field(
        1024, ge=64, le=1 << 20, description="context length of a fresh preset (a `path` checkpoint keeps its own)"
    )
    init_seed: int = Field(0, description="seed of a fresh preset's random initial weights")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where the train and rollout roles compute: "
        "auto = cuda when the actor sees a GPU, else "
        "cpu (docs/gpu.md)",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="compute dtype of the train and rollout "
        "roles: bf16 engine, fp32 master weights "
        "with bf16 autocast for training",
    )
    lora: LoraConfig | None = Field(
        None,
        description="train LoRA adapters instead of every weight, and sync only the adapters (null: full fine-tuning)",
    )
