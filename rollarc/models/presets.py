"""Size presets for the tiny Llama-architecture policies that rollarc trains on a CPU.

The architecture is the stock ``transformers`` Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU
MLP), so every checkpoint rollarc writes loads with ``AutoModelForCausalLM`` and vLLM. Llama rather
than Qwen2 because ``AutoTokenizer`` forces Qwen2's own BPE pipeline on any ``qwen2`` directory, which
would not load rollarc's character tokenizer as written.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rollarc.models.sizes import PRESETS as PRESETS  # re-exported: the table lives apart from torch


def build_config(
    preset: str,
    vocab_size: int,
    max_position_embeddings: int = 1024,
    *,
    pad_token_id: int = 0,
    eos_token_id: int = 0,
    bos_token_id: int | None = None,
) -> LlamaConfig:
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; allowed: {', '.join(PRESETS)}")
    p = PRESETS[preset]
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,  # type: ignore[call-arg]  # transformers 5 takes it through **kwargs, 4.x by name
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=bos_token_id,
        use_cache=True,
    )


def build_model(
    preset: str,
    vocab_size: int,
    max_position_embeddings: int = 1024,
    *,
    seed: int = 0,
    pad_token_id: int = 0,
    eos_token_id: int = 0,
) -> LlamaForCausalLM:
    """A freshly initialised fp32 model; the same seed gives the same weights."""
    config = build_config(
        preset, vocab_size, max_position_embeddings, pad_token_id=pad_token_id, eos_token_id=eos_token_id
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    return model.float().eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
