"""Sampling maths: greedy, temperature, top-k / top-p sets, renormalised log-probs, NaN rows, seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rollarc.engine.sampling import draw_uniforms, sample
from rollarc.engine.types import SamplingParams


def _row(values: list[float]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float32)


def _params(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, rows: int = 1):
    return (torch.full((rows,), temperature), torch.full((rows,), top_k, dtype=torch.long), torch.full((rows,), top_p))


PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS = _row([math.log(p) for p in PROBS])


def test_greedy_returns_argmax_and_its_t1_logprob() -> None:
    logits = _row([1.0, 3.0, 2.0])
    out = sample(logits, *_params(temperature=0.0), uniforms=torch.tensor([0.99]))
    expected = 3.0 - math.log(math.exp(1.0) + math.exp(3.0) + math.exp(2.0))
    assert out.token_ids.tolist() == [1]
    assert out.logprobs.item() == pytest.approx(expected, abs=1e-6)
    assert out.ok.tolist() == [True]


@pytest.mark.parametrize(("uniform", "token"), [(0.0, 0), (0.49, 0), (0.51, 1), (0.79, 1), (0.81, 2), (0.96, 3)])
def test_inverse_cdf_picks_the_token_whose_interval_holds_u(uniform: float, token: int) -> None:
    out = sample(LOGITS, *_params(), uniforms=torch.tensor([uniform]))
    assert out.token_ids.item() == token
    assert out.logprobs.item() == pytest.approx(math.log(PROBS[token]), abs=1e-6)


def test_top_p_renormalises_over_the_kept_set() -> None:
    # Mass before each token: 0, 0.5, 0.8, 0.95 -> top_p=0.7 keeps {0, 1}; renormalised 0.625 / 0.375.
    out = sample(LOGITS, *_params(top_p=0.7), uniforms=torch.tensor([0.99]))
    assert out.token_ids.item() == 1
    assert out.logprobs.item() == pytest.approx(math.log(0.3 / 0.8), abs=1e-6)


def test_top_k_renormalises_over_the_k_best() -> None:
    # top_k=3 keeps {0, 1, 2} with mass 0.95; u=0.99 -> the last kept token, 2.
    out = sample(LOGITS, *_params(top_k=3), uniforms=torch.tensor([0.99]))
    assert out.token_ids.item() == 2
    assert out.logprobs.item() == pytest.approx(math.log(0.15 / 0.95), abs=1e-6)


def test_top_k_then_top_p_as_vllm() -> None:
    # top_k=3 -> [0.5, 0.3, 0.15]/0.95 = [0.526, 0.316, 0.158]; top_p=0.8: mass before = 0, 0.526, 0.842 -> {0, 1}.
    out = sample(LOGITS, *_params(top_k=3, top_p=0.8), uniforms=torch.tensor([0.99]))
    assert out.token_ids.item() == 1
    assert out.logprobs.item() == pytest.approx(math.log(0.3 / 0.8), abs=1e-6)


def test_temperature_logprob_is_log_softmax_of_scaled_logits() -> None:
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    out = sample(logits, *_params(temperature=0.7), uniforms=torch.tensor([0.3]))
    expected = torch.log_softmax(logits / 0.7, dim=-1)[0, out.token_ids.item()]
    assert out.logprobs.item() == pytest.approx(expected.item(), abs=1e-6)


def test_mixed_batch_greedy_and_sampled_rows() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [math.log(0.2), math.log(0.7), math.log(0.1)]])
    temperature = torch.tensor([0.0, 1.0])
    out = sample(logits, temperature, torch.zeros(2, dtype=torch.long), torch.ones(2), torch.tensor([0.9, 0.5]))
    assert out.token_ids.tolist() == [1, 1]  # row 1: cdf [0.2, 0.9, 1.0] (no filter: vocabulary order), u=0.5
    assert out.logprobs[1].item() == pytest.approx(math.log(0.7), abs=1e-6)


def test_nan_and_inf_rows_are_flagged_and_others_unaffected() -> None:
    logits = torch.tensor([[1.0, float("nan"), 0.0], [0.0, 2.0, 1.0], [float("inf"), 0.0, 0.0]])
    for temperature in (0.0, 1.0):
        # row 1: probabilities [0.09, 0.67, 0.24]; u=0.5 falls in token 1's interval in any order of the CDF
        out = sample(logits, *_params(temperature=temperature, rows=3), uniforms=torch.tensor([0.5, 0.5, 0.5]))
        assert out.ok.tolist() == [False, True, False]
        assert out.token_ids[1].item() == 1
        assert torch.isfinite(out.logprobs[1])


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.floats(-8.0, 8.0, allow_nan=False, width=32), min_size=2, max_size=12),
    top_k=st.integers(0, 12),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.2, 2.0),
    uniform=st.floats(0.0, 0.999999),
)
@example(logits=[0.0, 0.0], top_k=0, top_p=0.5, temperature=1.0, uniform=0.0)  # regression: exactly on the boundary
def test_sampled_token_is_always_in_the_allowed_set(
    logits: list[float], top_k: int, top_p: float, temperature: float, uniform: float
) -> None:
    out = sample(
        _row(logits), *_params(temperature=temperature, top_k=top_k, top_p=top_p), uniforms=torch.tensor([uniform])
    )
    # Independent reference in float64: the allowed set and its renormalised log-probs.
    scaled = np.array(logits, dtype=np.float64) / np.float32(temperature)
    order = np.argsort(-scaled, kind="stable")
    probs = np.exp(scaled[order] - scaled.max())
    probs /= probs.sum()
    top = np.ones(len(logits), dtype=bool)
    if top_k:
        top[top_k:] = False
    kept = np.where(top, probs, 0.0)
    kept /= kept.sum()
    mass_before = np.cumsum(kept) - kept

    def allowed(slack: float) -> np.ndarray:
        keep = top & (mass_before < top_p + slack)
        keep[0] = True
        return keep

    # A token whose preceding mass equals top_p to float32 precision may go either way: accept both sets.
    wide, narrow = allowed(1e-6), allowed(-1e-6)
    token = out.token_ids.item()
    assert round(float(scaled[token]), 5) in set(scaled[order][wide].round(5))  # ties: judge by value, not index
    position = int(np.nonzero(order == token)[0][0])
    expected = []
    for keep in (wide, narrow):
        if keep[position]:
            final = np.where(keep, kept, 0.0)
            expected.append(math.log(final[position] / final.sum()))
    assert any(out.logprobs.item() == pytest.approx(e, abs=1e-4) for e in expected)


def test_draw_uniforms_uses_each_rows_own_generator() -> None:
    default = torch.Generator().manual_seed(123)
    alone = draw_uniforms([torch.Generator().manual_seed(7)], default)
    in_batch = draw_uniforms([None, torch.Generator().manual_seed(7), None], torch.Generator().manual_seed(5))
    assert in_batch[1].item() == alone[0].item()
    assert in_batch.min().item() >= 0.0 and in_batch.max().item() < 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -1.0),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -1),
        ("max_tokens", 0),
        ("stop", ("",)),
    ],
)
def test_bad_sampling_params_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**{field: value})


def test_sampling_params_accepts_lists_and_a_single_stop_string() -> None:
    params = SamplingParams(stop_token_ids=[3, 4], stop="END")
    assert params.stop_token_ids == (3, 4) and params.stop == ("END",)


def test_unfiltered_rows_sample_in_vocabulary_order_with_the_tempered_logprob() -> None:
    """No top-k/top-p: the inverse CDF runs over the vocabulary unsorted (no sort), each token with its probability."""
    probs = [0.1, 0.6, 0.3]
    logits = _row([math.log(p) for p in probs])
    for uniform, token in [(0.05, 0), (0.11, 1), (0.69, 1), (0.71, 2), (0.99, 2)]:
        out = sample(logits, *_params(), uniforms=torch.tensor([uniform]))
        assert out.token_ids.item() == token
        assert out.logprobs.item() == pytest.approx(math.log(probs[token]), abs=1e-6)
    hot = sample(logits, *_params(temperature=2.0), uniforms=torch.tensor([0.0]))
    tempered = np.sqrt(probs) / np.sqrt(probs).sum()  # softmax(log p / 2)
    assert hot.token_ids.item() == 0 and hot.logprobs.item() == pytest.approx(math.log(tempered[0]), abs=1e-6)
