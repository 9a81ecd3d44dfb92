"""A turn interrupted by a weight update keeps its partial output and resumes under the new weights.

The scripted generator below is a "model" whose token at position i of a turn is a function of (seed, i) alone,
so an uninterrupted turn and an interrupted one can be compared by hand; the engine tests use the real engine.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from rollarc.agent.turn import MAX_TURN_RETRIES, GenerationFailure, generate_turn
from rollarc.config import SamplingConfig
from rollarc.engine import LLMEngine, SamplingParams
from rollarc.engine.types import Completion
from tests.unit.test_engine_models import random_prompts, scramble, tiny_hf_model

SAMPLING = SamplingConfig(temperature=1.0)
PROMPT = [5, 6, 7]


class Interrupting:
    """Token i of a turn is ``seed % 7 + i``; call n is cut after ``cut[n]`` tokens (None: runs to the end).

    Each call runs under version ``n`` (a weight update lands between calls), like ``in_flight_update: abort``.
    """

    def __init__(self, cut: list[int | None]):
        self.cut = cut
        self.calls: list[tuple[list[int], SamplingParams]] = []

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        n = len(self.calls)
        self.calls.append((list(prompt_ids), params))
        start = params.skip_draws
        ids = [(params.seed or 0) % 7 + start + j for j in range(params.max_tokens)]
        cut = self.cut[n] if n < len(self.cut) else None
        if cut is not None:
            ids = ids[:cut]
        reason = "abort" if cut is not None else "length"
        return Completion(cache_key, len(prompt_ids), ids, [-0.1 * t for t in ids], [n] * len(ids), n, reason)


def run(gen, max_tokens: int = 8):
    return asyncio.run(generate_turn(gen, PROMPT, max_tokens, SAMPLING, "t", seed=3))


def test_an_interrupted_turn_keeps_its_prefix_and_resumes_with_the_rest_of_its_budget():
    whole = run(Interrupting([])).completion
    assert whole.token_ids == [3, 4, 5, 6, 7, 8, 9, 10] and whole.token_versions == [0] * 8

    gen = Interrupting([3])
    turn = run(gen)
    assert turn.completion.token_ids == whole.token_ids  # bitwise: the prefix kept, the rest continues the seed
    assert turn.completion.token_versions == [0, 0, 0, 1, 1, 1, 1, 1]  # non-decreasing, both versions
    assert turn.completion.logprobs == pytest.approx([-0.1 * t for t in whole.token_ids])
    assert turn.completion.finish_reason == "length" and turn.completion.prompt_len == 3
    assert (turn.resumes, turn.kept_tokens) == (1, 3)
    # the resumption: prompt + partial output, the remaining 5 tokens, 3 draws skipped, the same seed
    prompt, params = gen.calls[1]
    assert prompt == [5, 6, 7, 3, 4, 5]
    assert (params.max_tokens, params.skip_draws, params.seed) == (5, 3, 3)


def test_the_retry_cap_counts_only_interruptions_without_progress():
    # one token per attempt: 8 interruptions, more than the cap, but each made progress
    turn = run(Interrupting([1] * 7 + [1]))
    assert turn.completion.token_ids == [3, 4, 5, 6, 7, 8, 9, 10]
    assert turn.completion.token_versions == list(range(8))
    assert turn.completion.finish_reason == "length"  # the 8th token ended the budget as it was cut
    assert (turn.resumes, turn.kept_tokens) == (7, 7)
    # interruptions without a new token: the cap (MAX_TURN_RETRIES + 1 of them fail the turn), with tokens kept
    with pytest.raises(GenerationFailure, match=r"aborted 4 times without a new token \(2 kept\)") as err:
        run(Interrupting([2] + [0] * (MAX_TURN_RETRIES + 1)))
    assert err.value.kind == "generation_aborted"
    assert run(Interrupting([2] + [0] * MAX_TURN_RETRIES)).completion.token_ids == [3, 4, 5, 6, 7, 8, 9, 10]


def _engine_generate(engine: LLMEngine, cut_after_steps: int | None, new_weights: dict[str, torch.Tensor] | None):
    """A GenerateFn on a real engine: the first call is aborted after ``cut_after_steps`` steps, then the weights are
    replaced by ``new_weights`` as version 1 (the engine drops its prefix cache); later calls run to the end."""
    calls = []

    async def generate(prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        calls.append(params)
        request_id = engine.add_request(prompt_ids, params, request_id=f"r{len(calls)}")
        finished: list[Completion] = []
        steps = 0
        while not finished:
            if len(calls) == 1 and cut_after_steps is not None and steps == cut_after_steps:
                engine.abort(request_id)
                finished = engine.take_finished()
                engine.update_weights(new_weights or dict(engine.model.named_parameters()), 1)
                break
            finished = engine.step()
            steps += 1
        return finished[0]

    return generate


def _turn(model, cut: int | None, new_weights=None):
    engine = LLMEngine(model)
    prompt = random_prompts([7])[0]
    return asyncio.run(generate_turn(_engine_generate(engine, cut, new_weights), prompt, 12, SAMPLING, "t", seed=42))


def test_on_the_engine_a_turn_resumed_under_unchanged_weights_is_the_uninterrupted_turn():
    model = tiny_hf_model()  # no EOS: every turn is 12 tokens
    whole = _turn(model, None).completion
    turn = _turn(model, 4)
    assert turn.kept_tokens == 4 and turn.resumes == 1
    assert turn.completion.token_ids == whole.token_ids and len(whole.token_ids) == 12
    assert turn.completion.logprobs == pytest.approx(whole.logprobs, abs=1e-4)
    assert turn.completion.token_versions == [0] * 4 + [1] * 8


def test_on_the_engine_a_turn_resumed_under_new_weights_keeps_its_prefix_and_continues_on_them():
    model = tiny_hf_model()
    other = dict(scramble(tiny_hf_model(), seed=5).named_parameters())
    whole = _turn(model, None).completion
    turn = _turn(model, 4, {k: v.detach().clone() for k, v in other.items()}).completion
    assert turn.token_ids[:4] == whole.token_ids[:4] and len(turn.token_ids) == len(whole.token_ids) == 12
    assert turn.token_versions == [0] * 4 + [1] * 8
    # the suffix is what the new weights draw from prompt + prefix, continuing the seed's numbers
    fresh = LLMEngine(scramble(tiny_hf_model(), seed=5))
    prompt = random_prompts([7])[0]
    rest = fresh.generate([prompt + whole.token_ids[:4]], SamplingParams(max_tokens=8, seed=42, skip_draws=4))[0]
    assert turn.token_ids[4:] == rest.token_ids
    assert turn.token_ids != whole.token_ids  # the new weights did change the turn
