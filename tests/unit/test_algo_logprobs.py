"""Per-token log-probs and entropies: alignment, hand-computed values, dtypes, bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.algo.logprobs import entropy_from_logits, token_logprobs

LN2, LN3 = math.log(2), math.log(3)
# Position 0 -> probs [1/4, 1/2, 1/4]; position 1 -> probs [3/5, 1/5, 1/5].
LOGITS = torch.tensor([[[0.0, LN2, 0.0], [LN3, 0.0, 0.0]]], dtype=torch.float64)


def test_logprob_of_each_target_by_hand():
    out = token_logprobs(LOGITS, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[math.log(1 / 2), math.log(3 / 5)]], dtype=torch.float64))


def test_model_output_sliced_as_documented_scores_the_next_token():
    # A "model" whose logits at position t put almost all mass on token ids[t+1]: log-probs near 0.
    ids = torch.tensor([[3, 1, 4, 1, 0]])
    full_logits = torch.full((1, 5, 5), -30.0)
    full_logits[0, torch.arange(4), ids[0, 1:]] = 30.0
    logp = token_logprobs(full_logits[:, :-1], ids[:, 1:])
    assert logp.shape == (1, 4) and (logp > -1e-6).all()
    assert (token_logprobs(full_logits[:, 1:], ids[:, 1:])[:, :3] < -50).all()  # mis-slicing scores the wrong tokens


def test_temperature_divides_the_logits():
    # [0, 2 ln2, 0] / 2 = [0, ln2, 0]: probs [1/4, 1/2, 1/4] again.
    logits = torch.tensor([[[0.0, 2 * LN2, 0.0]]], dtype=torch.float64)
    out = token_logprobs(logits, torch.tensor([[1]]), temperature=2.0)
    torch.testing.assert_close(out, torch.tensor([[math.log(1 / 2)]], dtype=torch.float64))


def test_entropy_by_hand():
    # H([1/4, 1/2, 1/4]) = 2 * 1/4 * ln4 + 1/2 * ln2 = 1.5 ln2;  H([3/5, 1/5, 1/5]) = 3/5 ln(5/3) + 2/5 ln5.
    out = entropy_from_logits(LOGITS)
    expected = [1.5 * LN2, 0.6 * math.log(5 / 3) + 0.4 * math.log(5)]
    torch.testing.assert_close(out, torch.tensor([expected], dtype=torch.float64))


def test_uniform_entropy_is_log_vocab_at_any_temperature():
    torch.testing.assert_close(entropy_from_logits(torch.zeros(2, 4, 3), temperature=0.5), torch.full((2, 4), LN3))


def test_matches_log_softmax_and_categorical_and_bf16_is_upcast():
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11)
    ids = torch.randint(0, 11, (3, 7))
    reference = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, ids, 0.7), reference)
    entropy = torch.distributions.Categorical(logits=logits / 0.7).entropy()
    torch.testing.assert_close(entropy_from_logits(logits, 0.7), entropy)
    assert token_logprobs(logits.bfloat16(), ids).dtype == torch.float32


def test_gradient_reaches_only_the_scoring_position():
    logits = torch.zeros(1, 3, 4, requires_grad=True)
    token_logprobs(logits, torch.tensor([[0, 2, 1]]))[0, 1].backward()
    # d log p(2) / d logits[:, 1] = onehot(2) - softmax = [-1/4, -1/4, 3/4, -1/4]; other positions untouched.
    expected = torch.zeros(1, 3, 4)
    expected[0, 1] = torch.tensor([-0.25, -0.25, 0.75, -0.25])
    torch.testing.assert_close(logits.grad, expected)


@pytest.mark.parametrize(
    "logits, ids, temperature, message",
    [
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), 1.0, r"\[\.\.\., tokens, vocab\]"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 2, dtype=torch.long), 1.0, "target_ids has shape"),
        (torch.zeros(1, 3, 4), torch.tensor([[0, 4, 1]]), 1.0, r"\[0, 4\)"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 3), 1.0, "integer"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), 0.0, "temperature"),
    ],
)
def test_bad_input_is_rejected(logits, ids, temperature, message):
    with pytest.raises(ValueError, match=message):
        token_logprobs(logits, ids, temperature)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(2, 9), st.floats(0.3, 3.0), st.integers(0, 2**16))
def test_probabilities_of_all_targets_sum_to_one(tokens, vocab, temperature, seed):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, tokens, vocab, generator=generator, dtype=torch.float64) * 4
    per_choice = torch.stack([token_logprobs(logits, torch.full((1, tokens), v), temperature)[0] for v in range(vocab)])
    assert (per_choice <= 0).all()
    torch.testing.assert_close(per_choice.exp().sum(0), torch.ones(tokens, dtype=torch.float64))
    entropy = entropy_from_logits(logits, temperature)[0]
    assert ((entropy >= -1e-12) & (entropy <= math.log(vocab) + 1e-12)).all()
