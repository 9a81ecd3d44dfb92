"""What vLLM's LoRA support takes, checked at start-up: the ranks it accepts and the layers it adapts.

No torch and no vLLM import: the config's preflight (``lora_problems``) reads these.
"""

from __future__ import annotations

from collections.abc import Sequence

# vLLM accepts only these values for ``max_lora_rank`` (vllm.config.lora.MaxLoRARanks)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The Llama decoder's projections, which vLLM's Llama packs (qkv_proj, gate_up_proj) and adapts with punica
# kernels; embed_tokens and lm_head take a different path there, not tested here, so they are refused.
VLLM_LORA_TARGETS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})


def vllm_max_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts that holds ``r`` (its LoRA slots are padded to it)."""
    for rank in VLLM_LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"model.lora.r {r} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}; lower it")


def vllm_lora_problems(r: int, target_modules: Sequence[str]) -> list[str]:
    """One line for each part of ``model.lora`` vLLM's LoRA cannot apply (empty when it can)."""
    problems = []
    if r > VLLM_LORA_RANKS[-1]:
        problems.append(
            f"model.lora.r {r} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}: lower it, or use "
            "rollout.backend: builtin"
        )
    other = sorted(set(target_modules) - VLLM_LORA_TARGETS)
    if other:
        problems.append(
            f"model.lora.target_modules {other} are not adapted by vLLM's LoRA here (it takes "
            f"{sorted(VLLM_LORA_TARGETS)}): drop them, or use rollout.backend: builtin"
        )
    return problems
