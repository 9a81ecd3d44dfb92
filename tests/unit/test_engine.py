"""LLMEngine behaviour: batching, log-probs, seeds, abort, weight updates, prefix reuse, stops, errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rollarc.engine import EngineConfig, LLMEngine, SamplingParams
from tests.unit.test_engine_models import VOCAB, hf_greedy, nano_policy, random_prompts, scramble, tiny_hf_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def _teacher_forced_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def test_nano_policy_greedy_matches_hf_generate_when_batched() -> None:
    model, _ = nano_policy()
    prompts = random_prompts([3, 17, 40, 8, 25], low=6, high=100)
    engine = LLMEngine(model, EngineConfig(max_num_seqs=8))
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (5, 12, 9, 12, 3)]
    completions = engine.generate(prompts, params)
    for prompt, sp, completion in zip(prompts, params, completions, strict=True):
        assert completion.token_ids == hf_greedy(model, prompt, sp.max_tokens)[: len(completion.token_ids)]
        assert completion.prompt_len == len(prompt)
    assert engine.stats()["running"] == 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_teacher_forced_forward(temperature: float) -> None:
    model = tiny_hf_model()
    prompts = random_prompts([4, 11, 23])
    engine = LLMEngine(model, EngineConfig(max_num_seqs=4))
    completions = engine.generate(
        prompts, [SamplingParams(temperature=temperature, max_tokens=15, seed=s) for s in range(3)]
    )
    for prompt, completion in zip(prompts, completions, strict=True):
        expected = _teacher_forced_logprobs(model, prompt, completion.token_ids, temperature)
        assert completion.logprobs == pytest.approx(expected, abs=1e-4)


def test_greedy_logprobs_are_t1_log_softmax() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([9])[0]
    completion = LLMEngine(model).generate([prompt], GREEDY)[0]
    assert completion.logprobs == pytest.approx(
        _teacher_forced_logprobs(model, prompt, completion.token_ids, 1.0), abs=1e-4
    )


def test_seeded_sampling_does_not_depend_on_the_batch() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([7])[0]
    seeded = SamplingParams(temperature=1.0, max_tokens=20, seed=42)
    alone = LLMEngine(model).generate([prompt], seeded)[0]
    others = random_prompts([5, 30, 2], seed=9)
    engine = LLMEngine(model, EngineConfig(seed=3))
    crowd = engine.generate(
        [*others[:2], prompt, *others[2:]],
        [SamplingParams(temperature=1.0, max_tokens=20)] * 2
        + [seeded]
        + [SamplingParams(temperature=0.5, max_tokens=4, seed=1)],
    )[2]
    assert crowd.token_ids == alone.token_ids
    assert crowd.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    again = LLMEngine(model).generate([prompt], SamplingParams(temperature=1.0, max_tokens=20, seed=43))[0]
    assert again.token_ids != alone.token_ids  # the seed matters


def test_a_resumed_request_skips_the_draws_of_its_partial_output() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([7])[0]
    whole = LLMEngine(model).generate([prompt], SamplingParams(temperature=1.0, max_tokens=12, seed=42))[0]
    engine = LLMEngine(model)
    rest = SamplingParams(temperature=1.0, max_tokens=7, seed=42)
    engine.add_request(prompt + whole.token_ids[:5], rest, request_id="resumed", skip_draws=5)
    finished = []
    while engine.has_unfinished():
        finished += engine.step()
    (resumed,) = finished
    assert resumed.token_ids == whole.token_ids[5:]
    assert resumed.logprobs == pytest.approx(whole.logprobs[5:], abs=1e-4)  # a prefill, not decode steps
    restarted = LLMEngine(model).generate([prompt + whole.token_ids[:5]], rest)[0]
    assert restarted.token_ids != whole.token_ids[5:]  # without the skip, the draws start over
    with pytest.raises(ValueError, match="skip_draws must be >= 0"):
        engine.add_request(prompt, rest, skip_draws=-1)
    # the agent loop's resumption carries the skip in its params, through any router or backend
    via_params = LLMEngine(model).generate([prompt + whole.token_ids[:5]], replace(rest, skip_draws=5))[0]
    assert via_params.token_ids == whole.token_ids[5:]
    with pytest.raises(ValueError, match=r"SamplingParams\.skip_draws must be >= 0"):
        SamplingParams(skip_draws=-1)


def test_abort_returns_tokens_so_far_and_frees_the_slot() -> None:
    model = tiny_hf_model()
    prompts = random_prompts([5, 9, 14])
    engine = LLMEngine(model, EngineConfig(max_num_seqs=2))
    ids = [engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=10)) for p in prompts]
    finished = []
    for _ in range(4):
        finished += engine.step()
    assert engine.stats()["running"] == 2 and engine.stats()["waiting"] == 1
    assert engine.abort(ids[0]) and engine.abort(ids[2])
    assert not engine.abort("no-such-request")
    assert engine.stats()["running"] == 1  # slot of ids[0] freed, ids[1] moved into slot 0
    while engine.has_unfinished():
        finished += engine.step()
    by_id = {c.request_id: c for c in finished}
    assert by_id[ids[0]].finish_reason == "abort" and by_id[ids[0]].token_ids == hf_greedy(model, prompts[0], 10)[:4]
    assert by_id[ids[2]].finish_reason == "abort" and by_id[ids[2]].token_ids == []  # still waiting when aborted
    assert by_id[ids[1]].finish_reason == "length"
    assert by_id[ids[1]].token_ids == hf_greedy(model, prompts[1], 10)  # unharmed by the slot move


def test_update_weights_changes_output_and_versions() -> None:
    model = tiny_hf_model(seed=0)
    other = tiny_hf_model(seed=1)
    prompt = random_prompts([6])[0]
    engine = LLMEngine(model)
    before = engine.generate([prompt], GREEDY)[0]
    assert before.version == 0 and set(before.token_versions) == {0}
    engine.update_weights(dict(other.named_parameters()), version=1)
    after = engine.generate([prompt], GREEDY)[0]
    assert after.token_ids == hf_greedy(other, prompt, 12) != before.token_ids
    assert after.version == 1 and set(after.token_versions) == {1}
    assert engine.stats()["version"] == 1


def test_update_during_a_request_gives_mixed_versions() -> None:
    model = tiny_hf_model(seed=0)
    engine = LLMEngine(model)
    request_id = engine.add_request(random_prompts([6])[0], GREEDY)
    for _ in range(5):
        assert engine.step() == []
    engine.update_weights(((n, p.detach() * 1.01) for n, p in tiny_hf_model(seed=1).named_parameters()), version=7)
    completion = []
    while not completion:
        completion = engine.step()
    assert completion[0].request_id == request_id
    assert completion[0].token_versions == [0] * 5 + [7] * 7
    assert completion[0].version == 0  # the oldest token's version: what staleness counts from


def test_bad_weight_update_changes_nothing() -> None:
    model = tiny_hf_model()
    engine = LLMEngine(model)
    snapshot = {n: p.detach().clone() for n, p in model.named_parameters()}
    good_name = "model.layers.0.mlp.up_proj.weight"
    with pytest.raises(KeyError, match=r"no\.such\.weight"):
        engine.update_weights({good_name: torch.zeros_like(snapshot[good_name]), "no.such.weight": torch.zeros(1)}, 1)
    with pytest.raises(ValueError, match="shape mismatch"):
        engine.update_weights({good_name: torch.zeros(3, 3)}, 1)
    assert all(torch.equal(p, snapshot[n]) for n, p in model.named_parameters())
    assert engine.version == 0


def test_prefix_reuse_gives_the_same_tokens_and_logprobs() -> None:
    model = tiny_hf_model()
    first_prompt = random_prompts([20])[0]
    engine = LLMEngine(model)
    turn1 = engine.generate([first_prompt], GREEDY, cache_keys=["traj-1"])[0]
    assert turn1.cached_prompt_tokens == 0
    assert engine.stats()["prefix_cache_tokens"] == len(first_prompt) + len(turn1.token_ids) - 1
    second_prompt = first_prompt + turn1.token_ids + [3, 4, 5]
    turn2 = engine.generate([second_prompt], GREEDY, cache_keys=["traj-1"])[0]
    assert turn2.cached_prompt_tokens == len(first_prompt) + len(turn1.token_ids) - 1
    fresh = LLMEngine(model, EngineConfig(prefix_cache_tokens=0)).generate([second_prompt], GREEDY)[0]
    assert fresh.cached_prompt_tokens == 0
    assert turn2.token_ids == fresh.token_ids
    assert turn2.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)
    assert engine.stats()["prefix_hits"] == 1


def test_prefix_reuse_of_a_diverging_prompt_and_other_keys() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([12])[0]
    engine = LLMEngine(model)
    engine.generate([prompt], GREEDY, cache_keys=["a"])
    diverged = prompt[:8] + [(t + 1) % VOCAB for t in prompt[8:]]
    other_key, same_key = engine.generate([diverged, diverged], GREEDY, cache_keys=["b", "a"])
    assert other_key.cached_prompt_tokens == 0
    assert same_key.cached_prompt_tokens == 8
    assert same_key.token_ids == other_key.token_ids


def test_update_weights_invalidates_cached_prefixes() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([10])[0]
    engine = LLMEngine(model)
    first = engine.generate([prompt], GREEDY, cache_keys=["t"])[0]
    engine.update_weights({}, version=1)
    assert engine.stats()["prefix_cache_tokens"] == 0
    second = engine.generate([prompt + first.token_ids], GREEDY, cache_keys=["t"])[0]
    assert second.cached_prompt_tokens == 0


def test_stop_token_is_kept_and_reported() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([6])[0]
    reference = hf_greedy(model, prompt, 12)
    stop_at = next(i for i, t in enumerate(reference) if t not in reference[:i] and i >= 2)
    params = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[reference[stop_at]])
    completion = LLMEngine(model).generate([prompt], params)[0]
    assert completion.finish_reason == "stop" and completion.stop_reason == reference[stop_at]
    assert completion.token_ids == reference[: stop_at + 1]


def test_model_eos_stops_unless_ignored() -> None:
    model = tiny_hf_model()
    prompt = random_prompts([6])[0]
    reference = hf_greedy(model, prompt, 12)
    stop_at = next(i for i, t in enumerate(reference) if t not in reference[:i] and i >= 2)
    model.generation_config.eos_token_id = reference[stop_at]
    stopped = LLMEngine(model).generate([prompt], GREEDY)[0]
    assert stopped.token_ids == reference[: stop_at + 1] and stopped.finish_reason == "stop"
    ignored = LLMEngine(model).generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0]
    assert ignored.token_ids == reference and ignored.finish_reason == "length"


def test_stop_string_with_tokenizer() -> None:
    model, tokenizer = nano_policy()
    prompt = tokenizer.encode("hello there")
    reference = LLMEngine(model, tokenizer=tokenizer).generate(
        [prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    )[0]
    text = tokenizer.decode(reference.token_ids)
    stop = text[3:5]
    cut = next(i for i in range(1, 13) if stop in tokenizer.decode(reference.token_ids[:i]))
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, stop=[stop, "never-there"])
    completion = LLMEngine(model, tokenizer=tokenizer).generate([prompt], params)[0]
    assert completion.finish_reason == "stop" and completion.stop_reason == stop
    assert completion.token_ids == reference.token_ids[:cut]


def test_stop_strings_need_a_tokenizer() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        LLMEngine(tiny_hf_model()).add_request([1, 2], SamplingParams(stop="x"))


def test_nan_weights_fail_requests_with_a_message_and_the_engine_recovers() -> None:
    model = tiny_hf_model()
    prompts = random_prompts([4, 9])
    engine = LLMEngine(model)
    good = engine.generate(prompts, GREEDY)
    weight = "model.layers.1.mlp.down_proj.weight"
    original = model.get_parameter(weight).detach().clone()
    engine.update_weights({weight: torch.full_like(original, float("nan"))}, version=1)
    failed = engine.generate(prompts, GREEDY)
    assert [c.finish_reason for c in failed] == ["error", "error"]
    assert all("NaN" in c.error and c.token_ids == [] for c in failed)
    engine.update_weights({weight: original}, version=2)
    recovered = engine.generate(prompts, GREEDY)  # same slots: the NaN KV must have been cleared
    assert [c.token_ids for c in recovered] == [c.token_ids for c in good]


def test_nan_in_one_request_mid_run_leaves_the_other_running() -> None:
    model = tiny_hf_model()
    prompts = random_prompts([4, 9])
    engine = LLMEngine(model, EngineConfig(max_num_seqs=2))
    ids = [engine.add_request(p, GREEDY) for p in prompts]
    engine.step()
    # Poison only request 0's KV in the cache: its next logits are NaN, request 1 is untouched.
    engine.kv.data[:, :, engine._requests[ids[0]].slot, :, :2] = float("nan")
    finished = []
    while engine.has_unfinished():
        finished += engine.step()
    by_id = {c.request_id: c for c in finished}
    assert by_id[ids[0]].finish_reason == "error" and "NaN/inf in logits at position" in by_id[ids[0]].error
    assert len(by_id[ids[0]].token_ids) == 1
    assert by_id[ids[1]].token_ids == hf_greedy(model, prompts[1], 12)


def test_too_long_prompt_is_rejected_and_long_generation_is_cut_at_max_model_len() -> None:
    model = tiny_hf_model()
    engine = LLMEngine(model, EngineConfig(max_model_len=32))
    too_long, fits = engine.generate(random_prompts([32, 28]), SamplingParams(temperature=0.0, max_tokens=10))
    assert too_long.finish_reason == "error" and "max_model_len=32" in too_long.error
    assert fits.finish_reason == "length" and len(fits.token_ids) == 4  # 28 + 4 = max_model_len


@pytest.mark.parametrize(("prompt", "match"), [([], "empty prompt"), ([1, VOCAB], "outside the vocabulary")])
def test_bad_prompts_raise_clear_errors(prompt: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LLMEngine(tiny_hf_model()).add_request(prompt)


def test_duplicate_request_id_is_rejected() -> None:
    engine = LLMEngine(tiny_hf_model())
    engine.add_request([1, 2], request_id="x")
    with pytest.raises(ValueError, match="'x' is already in use"):
        engine.add_request([3], request_id="x")


def test_more_requests_than_slots_all_finish_correctly() -> None:
    model = tiny_hf_model()
    prompts = random_prompts([3, 8, 2, 15, 6, 11, 4])
    engine = LLMEngine(model, EngineConfig(max_num_seqs=3, prefill_token_budget=8))
    params = [SamplingParams(temperature=0.0, max_tokens=n) for n in (3, 9, 1, 6, 12, 2, 7)]
    completions = engine.generate(prompts, params)
    for prompt, sp, completion in zip(prompts, params, completions, strict=True):
        assert completion.token_ids == hf_greedy(model, prompt, sp.max_tokens)
    stats = engine.stats()
    assert stats["generated_tokens"] == sum(sp.max_tokens for sp in params)
    assert stats["prefill_tokens"] == sum(map(len, prompts))
    assert stats["length"] == 7 and stats["waiting"] == 0 and stats["running"] == 0


def test_generate_keeps_completions_of_other_requests_for_step() -> None:
    engine = LLMEngine(tiny_hf_model())
    early = engine.add_request([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=2))
    [mine] = engine.generate([[4, 5]], SamplingParams(temperature=0.0, max_tokens=6))
    assert mine.num_tokens == 6
    assert [c.request_id for c in engine.step()] == [early]
    assert not engine.has_unfinished()


def test_completion_timing_fields_are_ordered() -> None:
    completion = LLMEngine(tiny_hf_model()).generate(random_prompts([5]), GREEDY)[0]
    assert completion.arrival_time <= completion.first_token_time <= completion.finish_time
    assert completion.time_to_first_token >= 0


def test_scramble_is_deterministic() -> None:
    a = scramble(tiny_hf_model(seed=3), seed=3)
    b = scramble(tiny_hf_model(seed=3), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_identical_prompts_in_one_step_are_prefilled_once_with_identical_results() -> None:
    model, _ = nano_policy()
    shared, other = random_prompts([21, 13], low=6, high=100, seed=5)
    prompts = [shared, other, shared, shared]
    params = [SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)] * 2 + [
        SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=s) for s in (1, 2)
    ]
    engine = LLMEngine(model, EngineConfig(max_num_seqs=8))
    completions = engine.generate(prompts, params)
    assert engine.counters["shared_prefill_tokens"] == 2 * len(shared)
    assert engine.counters["prefill_tokens"] == len(shared) + len(other)
    # the twin that was not computed decodes exactly as if it had been prefilled itself
    assert completions[0].token_ids == hf_greedy(model, shared, 8)
    for prompt, sp, completion in zip(prompts[2:], params[2:], completions[2:], strict=True):
        alone = LLMEngine(model).generate([prompt], sp)[0]
        assert completion.token_ids == alone.token_ids
        assert completion.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
