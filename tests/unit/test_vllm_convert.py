"""The vLLM backend's pure conversions and weight packing (no vLLM needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rollarc.engine.types import SamplingParams
from rollarc.serve.vllm_convert import completion_of, resumed_seed, sampled_logprobs, sampling_kwargs, token_versions
from rollarc.serve.vllm_weights import digest, pack, unpack


def test_sampling_kwargs_add_eos_as_stop_token_unless_ignored():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_tokens=5, stop_token_ids=(3,), seed=11)
    kw = sampling_kwargs(params, eos_ids=[2, 3])
    assert kw["stop_token_ids"] == [3, 2]
    assert kw["ignore_eos"] is True and kw["logprobs"] == 0
    assert (kw["temperature"], kw["top_p"], kw["top_k"], kw["max_tokens"], kw["seed"]) == (0.7, 0.9, -1, 5, 11)
    ignored = sampling_kwargs(SamplingParams(ignore_eos=True, top_k=4), eos_ids=[2])
    assert ignored["stop_token_ids"] == [] and ignored["top_k"] == 4


def test_stop_strings_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="without a tokenizer"):
        sampling_kwargs(SamplingParams(stop=("\n",)), eos_ids=[2])


def test_a_resumed_turn_gets_a_derived_seed():
    assert resumed_seed(7, 0) == 7
    assert resumed_seed(7, 3) == 7 * 1_000_003 + 3
    assert sampling_kwargs(SamplingParams(seed=7, skip_draws=3), eos_ids=[])["seed"] == 7 * 1_000_003 + 3
    assert sampling_kwargs(SamplingParams(seed=None, skip_draws=3), eos_ids=[])["seed"] is None


def test_token_versions_follow_the_spans_where_they_cover_every_token():
    spans = [SimpleNamespace(version="4", start=0, end=2), SimpleNamespace(version="5", start=2, end=5)]
    assert token_versions(spans, delivered=[4, 4, 4, 5, 5]) == [4, 4, 5, 5, 5]
    assert token_versions(None, delivered=[9, 9, 9]) == [9, 9, 9]
    assert token_versions([], delivered=[3]) == [3]  # an aborted request's final output has no spans
    short = [SimpleNamespace(version="4", start=0, end=1)]
    assert token_versions(short, delivered=[4, 5]) == [4, 5]


def _logprob(value: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=value)


def test_sampled_logprobs_pick_the_sampled_token():
    entries = [{10: _logprob(-0.5)}, {11: _logprob(-1.5), 99: _logprob(-0.1)}]
    assert sampled_logprobs("r", [10, 11], entries) == [-0.5, -1.5]
    with pytest.raises(RuntimeError, match="1 log-probs for 2 tokens"):
        sampled_logprobs("r", [10, 11], entries[:1])


def test_completion_of_keeps_the_oldest_version_and_the_times():
    c = completion_of("r", 4, [10, 11, 12], [-0.5, -1.5, -2.0], [1, 2, 2], "length", None, 2, (1.0, 1.5, 2.0))
    assert (c.token_ids, c.logprobs, c.token_versions, c.version) == ([10, 11, 12], [-0.5, -1.5, -2.0], [1, 2, 2], 1)
    assert (c.finish_reason, c.prompt_len, c.arrival_time, c.first_token_time, c.finish_time) == (
        "length", 4, 1.0, 1.5, 2.0)  # fmt: skip
    aborted = completion_of("r", 2, [], [], [], "abort", None, 3, (0.0, None, 0.0))
    assert (aborted.finish_reason, aborted.version, aborted.token_ids) == ("abort", 3, [])


def test_pack_round_trips_bit_for_bit_in_every_dtype():
    gen = torch.Generator().manual_seed(0)
    named = {
        "a": torch.randn(3, 4, generator=gen),
        "b": torch.randn(5, generator=gen).to(torch.bfloat16),
        "c": torch.randn(2, 2, generator=gen).to(torch.float16).t(),  # not contiguous
    }
    back = dict(unpack(pack(named)))
    for name, tensor in named.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert torch.equal(back[name].view(torch.uint8), tensor.contiguous().view(torch.uint8))


def test_digest_sees_one_flipped_bit():
    a = {"w": torch.zeros(4)}
    b = {"w": torch.zeros(4)}
    b["w"].view(torch.int32)[2] = 1  # the smallest subnormal: equal as numbers to a tolerance, not as bits
    assert digest(a.items()) == digest({"w": torch.zeros(4)}.items())
    assert digest(a.items()) != digest(b.items())
