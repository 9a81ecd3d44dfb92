"""Device and dtype from config: bf16 engine and trainer on the CPU, KV budget arithmetic, clear errors."""

from __future__ import annotations

import pytest
import torch

from rollarc.agent.chat import ChatRenderer
from rollarc.algo.config import LossConfig
from rollarc.config import load_train_config
from rollarc.config.io import ConfigError
from rollarc.engine import EngineConfig, LLMEngine, SamplingParams
from rollarc.engine.kv_cache import KVBudgetError, kv_bytes_per_token, plan_kv_cache
from rollarc.engine.sampling import sample
from rollarc.models import new_policy
from rollarc.models.device import DeviceUnavailableError, resolve_device, resolve_dtype
from rollarc.train.policy_trainer import PolicyTrainer
from tests.unit.test_policy_trainer import make_traj

# Measured: 0.971 of 768 greedy positions agree (32 prompts x 24 tokens, the tiny preset at its random init;
# 28 distinct outputs, so agreement is not a constant). Once a row diverges its later positions differ too.
BF16_GREEDY_AGREEMENT_MIN = 0.9


def _prompts(vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(4, 30, (32,), generator=generator)
    return [torch.randint(3, vocab, (int(n),), generator=generator).tolist() for n in lengths]


def test_bf16_engine_on_cpu_gives_fp32_logprobs_and_mostly_the_fp32_greedy_tokens() -> None:
    model, tokenizer = new_policy("tiny", max_position_embeddings=256, seed=0)
    prompts = _prompts(len(tokenizer))
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    reference = LLMEngine(model, EngineConfig(max_num_seqs=32, kv_cache_gb=0.1)).generate(prompts, params)
    bf16_model = new_policy("tiny", max_position_embeddings=256, seed=0)[0].to(torch.bfloat16)
    engine = LLMEngine(bf16_model, EngineConfig(max_num_seqs=32, kv_cache_gb=0.1, dtype="bfloat16"))
    assert engine.kv.data.dtype == torch.bfloat16
    out = engine.generate(prompts, params)
    logprobs = torch.tensor([lp for c in out for lp in c.logprobs], dtype=torch.float64)
    assert logprobs.numel() == 32 * 24 and bool(torch.isfinite(logprobs).all()) and bool((logprobs <= 0).all())
    total = sum(len(c.token_ids) for c in reference)
    agree = sum(
        a == b for r, c in zip(reference, out, strict=True) for a, b in zip(r.token_ids, c.token_ids, strict=False)
    )
    assert agree / total >= BF16_GREEDY_AGREEMENT_MIN


def test_sampler_computes_logprobs_in_fp32_from_bf16_logits() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.bfloat16)
    zero = torch.zeros(1)
    result = sample(logits, zero, torch.zeros(1, dtype=torch.long), torch.ones(1), zero)
    assert result.logprobs.dtype == torch.float32
    expected = torch.log_softmax(torch.tensor([0.0, 1.0, 2.0, 3.0]), -1)[3]
    assert result.token_ids.item() == 3 and result.logprobs.item() == pytest.approx(expected.item(), abs=1e-6)


def test_engine_dtype_must_match_the_model_it_is_given() -> None:
    model, _ = new_policy("nano", max_position_embeddings=64)
    with pytest.raises(ValueError, match=r"EngineConfig\.dtype is bfloat16 but the model's weights are torch\.float32"):
        LLMEngine(model, EngineConfig(dtype="bfloat16", kv_cache_gb=0.01))


def test_kv_bytes_per_token_and_plan_against_hand_computed_numbers() -> None:
    # A Qwen2.5-7B-like geometry: 28 layers, 4 KV heads, head_dim 128, bf16 -> 2*28*4*128*2 = 57344 bytes per token.
    per_token = kv_bytes_per_token(num_layers=28, num_kv_heads=4, head_dim=128, dtype_bytes=2)
    assert per_token == 57344
    # 60 GB budget: 60e9 // 57344 = 1046316 tokens -> 31 whole requests of 32768 tokens (of 64 asked).
    plan = plan_kv_cache(per_token, budget_bytes=60 * 10**9, max_num_seqs=64, max_model_len=32768)
    assert (plan.num_slots, plan.slot_len) == (31, 32768)
    assert plan.nbytes == 31 * 32768 * 57344
    # A budget that holds everything keeps max_num_seqs slots.
    assert plan_kv_cache(per_token, 10**12, 64, 4096).num_slots == 64
    with pytest.raises(KVBudgetError, match=r"holds 17438 tokens.*max_model_len=32768"):
        plan_kv_cache(per_token, budget_bytes=10**9, max_num_seqs=64, max_model_len=32768)


def test_engine_sizes_its_cache_from_the_memory_fraction_when_no_absolute_budget() -> None:
    model, _ = new_policy("nano", max_position_embeddings=64)
    engine = LLMEngine(model, EngineConfig(max_num_seqs=4, kv_cache_memory_fraction=0.01))
    assert engine.kv_plan.budget_bytes > 0 and engine.kv.max_num_seqs == 4 and engine.kv.max_model_len == 64


def test_device_names_resolve_and_cuda_without_a_gpu_is_one_clear_line() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("bfloat16") is torch.bfloat16 and resolve_dtype("float32") is torch.float32
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceUnavailableError) as error:
        resolve_device("cuda")
    assert "\n" not in str(error.value) and "model.device" in str(error.value)


def test_trainer_under_bf16_autocast_keeps_fp32_master_weights_and_optimiser_state() -> None:
    torch.manual_seed(0)
    model, tokenizer = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tokenizer)
    trainer = PolicyTrainer(
        model, LossConfig(), lr=1e-2, pad_id=tokenizer.pad_token_id, device="cpu", autocast_dtype=torch.bfloat16
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    group = [make_traj(renderer, "r", "R", 1.0), make_traj(renderer, "d", "D", 0.0)]
    stats = trainer.train_step([group])
    assert all(torch.isfinite(torch.tensor(v)) for k, v in stats.items() if isinstance(v, float))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    states = [s for s in trainer.optimizer.state.values()]
    assert states and all(s["exp_avg"].dtype == torch.float32 for s in states)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_device_and_dtype_keys_are_validated(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("tasks: [{name: fl, env: {id: frozen_lake}}]\n")
    cfg = load_train_config(path, ["model.device=cuda", "model.dtype=bfloat16", "engine.kv_cache_gb=2"])
    assert (cfg.model.device, cfg.model.dtype, cfg.engine.dtype, cfg.engine.kv_cache_gb) == (
        "cuda",
        "bfloat16",
        None,
        2.0,
    )
    defaults = load_train_config(path, [])
    assert (defaults.model.device, defaults.model.dtype) == ("auto", "float32")
    with pytest.raises(ConfigError, match=r"model\.device"):
        load_train_config(path, ["model.device=gpu"])
    with pytest.raises(ConfigError, match=r"engine\.dtype"):
        load_train_config(path, ["engine.dtype=float16"])
    with pytest.raises(ConfigError, match=r"engine\.kv_cache_memory_fraction"):
        load_train_config(path, ["engine.kv_cache_memory_fraction=1.5"])
