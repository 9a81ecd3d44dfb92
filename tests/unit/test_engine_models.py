"""Model builders for the engine tests, and the test that rollarc's runner matches HF on every supported family.

Randomly initialised HF models (std 0.02) mostly repeat their input, which would make "same greedy
tokens as HF" pass trivially; :func:`scramble` gives them large random weights, so that outputs vary
with the prompt and any mistake in attention, RoPE or the KV cache changes the tokens.
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from rollarc.engine import EngineConfig, LLMEngine, SamplingParams, UnsupportedModelError
from rollarc.models import new_policy

VOCAB = 50


def scramble(model: PreTrainedModel, seed: int = 0) -> PreTrainedModel:
    """Large random weights (norm gains near 1), deterministic in ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(0.5 + torch.rand(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * (0.5 if param.dim() == 2 else 0.1))
    return model.eval()


def tiny_hf_model(family: str = "llama", seed: int = 0, **overrides) -> PreTrainedModel:
    """A 2-layer, 4-head (2 KV heads) model of ``family`` with vocabulary ``VOCAB`` and no EOS."""
    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "mistral": (MistralConfig, MistralForCausalLM),
    }
    config_cls, model_cls = classes[family]
    kwargs = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        eos_token_id=None,
        pad_token_id=0,
    )
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return scramble(model_cls(config_cls(**kwargs)), seed)


def nano_policy(seed: int = 0):
    """rollarc's ``nano`` preset with its character tokenizer, scrambled."""
    model, tokenizer = new_policy("nano", max_position_embeddings=256, seed=seed)
    return scramble(model, seed), tokenizer


def hf_greedy(model: PreTrainedModel, prompt: list[int], max_new_tokens: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def random_prompts(lengths: list[int], seed: int = 1, low: int = 1, high: int = VOCAB) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(low, high, (n,), generator=generator).tolist() for n in lengths]


FAMILIES = {
    "llama": {},
    "llama-untied-bias": {"tie_word_embeddings": False, "attention_bias": True, "mlp_bias": True},
    "llama-rope-linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen2": {},
    "qwen2-sliding": {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1},
    "qwen3": {"head_dim": 16},
    "mistral-sliding": {"sliding_window": 7},
}


@pytest.mark.parametrize("variant", sorted(FAMILIES))
def test_greedy_matches_hf_generate_for_each_family(variant: str) -> None:
    model = tiny_hf_model(variant.split("-")[0], **FAMILIES[variant])
    prompts = random_prompts([1, 6, 13, 30])
    # 2 slots and a 16-token prefill budget: requests join and leave mid-run, slots get compacted.
    engine = LLMEngine(model, EngineConfig(max_num_seqs=2, prefill_token_budget=16))
    completions = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=20))
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.token_ids == hf_greedy(model, prompt, 20)
        assert completion.finish_reason == "length"


def test_scrambled_model_output_depends_on_prompt() -> None:
    """The builders above make models whose greedy output is not a constant: the comparisons mean something."""
    model = tiny_hf_model("llama")
    outputs = {tuple(hf_greedy(model, p, 8)) for p in random_prompts([3, 5, 7, 9])}
    assert len(outputs) == 4
    assert all(len(set(o)) > 2 for o in outputs)


def test_unsupported_model_type_is_named() -> None:
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    with pytest.raises(UnsupportedModelError, match="'gpt2'"):
        LLMEngine(model)


def test_kv_budget_reduces_slots_not_request_length() -> None:
    # 2 layers x 2 KV heads x head_dim 8 x K,V x 4 bytes = 256 bytes per token; 0.01 GB holds 39062 tokens,
    # i.e. 305 whole requests of 128 tokens, fewer than the 4096 slots asked for.
    engine = LLMEngine(tiny_hf_model(), EngineConfig(max_num_seqs=4096, kv_cache_gb=0.01))
    assert engine.kv_plan.bytes_per_token == 256
    assert (engine.kv.max_num_seqs, engine.kv.max_model_len) == (305, 128)
    assert engine.stats()["max_num_seqs"] == 305 and engine.kv.nbytes == 305 * 128 * 256


def test_kv_budget_below_one_request_is_refused_with_the_keys_to_change() -> None:
    with pytest.raises(ValueError, match=r"holds 127 tokens.*max_model_len=128.*engine\.kv_cache_gb"):
        LLMEngine(tiny_hf_model(), EngineConfig(kv_cache_gb=127 * 256 / 1e9))


def test_max_model_len_beyond_model_positions_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        LLMEngine(tiny_hf_model(), EngineConfig(max_model_len=4096))
