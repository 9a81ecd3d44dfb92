"""GSPO's sequence-level ratio and CISPO's clipped-weight loss against hand-computed numbers."""

import math

import pytest
import torch

from rollarc.algo.config import LossConfig
from rollarc.algo.losses import ppo_clip_loss
from rollarc.algo.minibatch_loss import policy_loss
from rollarc.algo.surrogates import cispo_loss, gspo_loss

F64 = torch.float64


def logs(rows):
    return torch.tensor([[math.log(v) for v in row] for row in rows], dtype=F64)


# ---- GSPO ------------------------------------------------------------------------------------------------
# Two sequences against logp_old = 0, so each token's ratio is its value here. Sequence 0 has three policy
# tokens (ratios 2, 0.5, 1.5; the fourth is masked out and holds garbage), sequence 1 has two (1.1, 1.1).
RATIOS = [[2.0, 0.5, 1.5, 1.0], [1.1, 1.1, 1.0, 1.0]]
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
ADV = torch.tensor([[1.0, 1.0, 1.0, 0.0], [-2.0, -2.0, 0.0, 0.0]], dtype=F64)


def test_gspo_clips_the_length_normalised_sequence_ratio_by_hand():
    logp = logs(RATIOS).requires_grad_(True)
    logp_old = torch.zeros_like(logp)
    logp_old[0, 3] = float("inf")  # masked out: must change nothing
    loss, stats = gspo_loss(logp, logp_old, ADV, MASK, clip_low=0.2, clip_high=0.28)
    # s_0 = (2 * 0.5 * 1.5) ** (1/3) = 1.5 ** (1/3) = 1.14471; A_0 = 1: -min(1.14471, clip 1.14471) = -1.14471
    # s_1 = (1.1 * 1.1) ** (1/2) = 1.1;                   A_1 = -2: -min(-2.2, -2.2) = 2.2
    s0 = 1.5 ** (1 / 3)
    assert loss.item() == pytest.approx((-s0 + 2.2) / 2)
    assert stats["ratio_mean"].item() == pytest.approx((s0 + 1.1) / 2)
    assert stats["clip_frac"].item() == 0.0
    loss.backward()
    # d(-s_i A_i / 2)/d logp_t = -s_i A_i / (2 |y_i|) for each token of sequence i: one gradient per sequence
    expected = torch.tensor(
        [[-s0 / 6, -s0 / 6, -s0 / 6, 0.0], [2.2 / 4, 2.2 / 4, 0.0, 0.0]],
        dtype=F64,
    )
    torch.testing.assert_close(logp.grad, expected)


def test_gspo_drops_the_gradient_of_a_whole_sequence_outside_the_range_and_ignores_token_outliers():
    # The paper's narrow range: 1.5 ** (1/3) = 1.145 is above 1 + 4e-4 with A > 0, so sequence 0 is clipped and
    # gets no gradient; PPO's token clip would still pass the token whose ratio is 0.5.
    logp = logs(RATIOS).requires_grad_(True)
    loss, stats = gspo_loss(logp, torch.zeros_like(logp), ADV, MASK, clip_low=3e-4, clip_high=4e-4)
    # sequence 1: s = 1.1 with A = -2 is above the range on the pessimistic side: unclipped, -min(-2.2, -2.0008)
    assert loss.item() == pytest.approx((-(1 + 4e-4) + 2.2) / 2)
    assert stats["clip_frac"].item() == 0.5 and stats["clip_frac_high"].item() == 0.5
    loss.backward()
    assert logp.grad[0].abs().sum().item() == 0.0
    torch.testing.assert_close(logp.grad[1], torch.tensor([2.2 / 4, 2.2 / 4, 0.0, 0.0], dtype=F64))


def test_gspo_weighs_each_sequence_by_its_mean_token_weight():
    logp = torch.zeros(2, 4, dtype=F64)
    weights = torch.tensor([[2.0, 2.0, 0.5, 9.0], [1.0, 0.0, 9.0, 9.0]], dtype=F64)
    loss, _ = gspo_loss(logp, logp, ADV, MASK, 0.2, 0.28, token_weights=weights)
    # on-policy, s = 1: sequence 0 -1 * 1.5 (mean of 2, 2, 0.5), sequence 1 +2 * 0.5
    assert loss.item() == pytest.approx((-1.5 + 1.0) / 2)


# ---- CISPO -----------------------------------------------------------------------------------------------
TOKENS = [[1.5, 0.5, 1.1, 1.0]]  # ratios against logp_old = 0
TOKEN_ADV = torch.tensor([[1.0, -1.0, 2.0, 0.0]], dtype=F64)
TOKEN_MASK = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)


def test_cispo_keeps_every_tokens_gradient_scaled_by_its_clipped_ratio_by_hand():
    logp = logs(TOKENS).requires_grad_(True)
    loss, stats = cispo_loss(logp, torch.zeros_like(logp), TOKEN_ADV, TOKEN_MASK, clip_low=0.2, clip_high=0.28)
    # weights clip(rho, 0.8, 1.28): 1.28, 0.8, 1.1; loss = -mean(w * A * logp)
    w = [1.28, 0.8, 1.1]
    terms = [w[0] * 1.0 * math.log(1.5), w[1] * -1.0 * math.log(0.5), w[2] * 2.0 * math.log(1.1)]
    assert loss.item() == pytest.approx(-sum(terms) / 3)
    assert stats["clip_frac"].item() == pytest.approx(2 / 3)
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.1) / 3)
    loss.backward()
    # the clipped tokens (rho 1.5 with A > 0, rho 0.5 with A < 0) keep a gradient: PPO's would be 0 there
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.28 / 3, 0.8 / 3, -2.2 / 3, 0.0]], dtype=F64))


def test_on_policy_cispo_and_gspo_have_ppos_gradient():
    logp = torch.tensor([[-0.3, -1.2, -2.0, -0.7]], dtype=F64)
    adv = torch.tensor([[0.5, 0.5, 0.5, 0.5]], dtype=F64)  # one sequence: one advantage for all its tokens
    mask = torch.ones_like(logp, dtype=torch.bool)
    grads = []
    for fn in (ppo_clip_loss, cispo_loss, gspo_loss):
        x = logp.clone().requires_grad_(True)
        fn(x, logp, adv, mask, 0.2, 0.28)[0].backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(grads[2], grads[0])  # one sequence, token_mean: the same -A/n per token


def test_policy_loss_dispatches_on_the_surrogate_and_gspo_refuses_seq_mean():
    logp = logs(RATIOS)
    zeros = torch.zeros_like(logp)
    by_hand = (-(1.5 ** (1 / 3)) + 2.2) / 2
    loss, _ = policy_loss(logp, zeros, None, ADV, MASK, LossConfig(surrogate="gspo"))
    assert loss.item() == pytest.approx(by_hand)
    loss, _ = policy_loss(logp, zeros, None, ADV, MASK, LossConfig(surrogate="cispo"))
    assert loss.item() == pytest.approx(cispo_loss(logp, zeros, ADV, MASK, 0.2, 0.28)[0].item())
    with pytest.raises(ValueError, match=r"agg='seq_mean' has no effect .* surrogate='gspo'"):
        LossConfig(surrogate="gspo", agg="seq_mean")
