"""Clipped PPO loss, aggregation, k3 KL and entropy bonus against hand-computed numbers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.algo.losses import entropy_bonus, kl_k3, ppo_clip_loss
from rollarc.algo.masking import aggregate


def logs(*values):
    return torch.tensor([[math.log(v) for v in values]], dtype=torch.float64)


def test_kl_k3_by_hand():
    # d = ref - logp.  d = -ln2: 1/2 + ln2 - 1;  d = ln2: 2 - ln2 - 1;  d = 0: 0.
    out = kl_k3(logs(0.5, 0.25, 0.3), logs(0.25, 0.5, 0.3))
    torch.testing.assert_close(out, torch.tensor([[math.log(2) - 0.5, 1 - math.log(2), 0.0]], dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-20, 0), min_size=1, max_size=8), st.lists(st.floats(-20, 0), min_size=1, max_size=8))
def test_kl_k3_is_never_negative(a, b):
    n = min(len(a), len(b))
    assert (kl_k3(torch.tensor(a[:n]), torch.tensor(b[:n])) >= 0).all()


# Five tokens: ratio rho = pi/pi_old and advantage A; clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28].
RATIOS = (1.5, 1.5, 0.5, 0.5, 1.1)
ADVANTAGES = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0]], dtype=torch.float64)


def five_tokens():
    logp = logs(*RATIOS).requires_grad_(True)  # logp_old = 0, so rho = exp(logp)
    return logp, torch.zeros_like(logp), torch.ones_like(logp, dtype=torch.bool)


def test_ppo_clip_loss_by_hand():
    logp, logp_old, mask = five_tokens()
    loss, stats = ppo_clip_loss(logp, logp_old, ADVANTAGES, mask, clip_low=0.2, clip_high=0.28)
    # -min(rho*A, clip(rho)*A):
    #   rho 1.5, A +1: -min(1.5, 1.28)  = -1.28  (clipped high: no gradient)
    #   rho 1.5, A -1: -min(-1.5, -1.28) = 1.5   (pessimistic branch is unclipped: gradient flows)
    #   rho 0.5, A +1: -min(0.5, 0.8)   = -0.5
    #   rho 0.5, A -1: -min(-0.5, -0.8) = 0.8    (clipped low: no gradient)
    #   rho 1.1, A +2: -min(2.2, 2.2)   = -2.2
    assert loss.item() == pytest.approx((-1.28 + 1.5 - 0.5 + 0.8 - 2.2) / 5)  # -0.336
    assert stats["clip_frac"].item() == pytest.approx(2 / 5)
    assert stats["clip_frac_high"].item() == pytest.approx(1 / 5)
    assert stats["clip_frac_low"].item() == pytest.approx(1 / 5)
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 1.5 + 0.5 + 0.5 + 1.1) / 5)
    k3 = [(r - 1) - math.log(r) for r in RATIOS]
    assert stats["approx_kl"].item() == pytest.approx(sum(k3) / 5)
    loss.backward()
    # d/dlogp of -rho*A/5 is -rho*A/5 on unclipped tokens, 0 on clipped ones.
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 1.5 / 5, -0.5 / 5, 0.0, -2.2 / 5]], dtype=torch.float64))


def test_asymmetric_clip_lets_a_positive_token_rise_further_than_a_negative_one_falls():
    logp = logs(1.25, 0.75)
    old, mask, adv = torch.zeros_like(logp), torch.ones_like(logp, dtype=torch.bool), torch.tensor([[1.0, -1.0]])
    asym, _ = ppo_clip_loss(logp, old, adv.double(), mask, clip_low=0.2, clip_high=0.28)
    sym, _ = ppo_clip_loss(logp, old, adv.double(), mask, clip_low=0.2, clip_high=0.2)
    # rho 1.25 with A>0 lies inside [0.8, 1.28] (loss -1.25) but above 1.2 (loss -1.2);
    # rho 0.75 with A<0 is clipped at 0.8 either way (loss 0.8).
    assert asym.item() == pytest.approx((-1.25 + 0.8) / 2)
    assert sym.item() == pytest.approx((-1.2 + 0.8) / 2)


def test_token_mean_and_seq_mean_on_sequences_of_different_lengths():
    # rho = 1, so each token's loss is -A. Seq 0: three tokens with A=1; seq 1: one token with A=-2;
    # seq 2: no policy tokens (left out of seq_mean). Masked-out entries hold junk.
    logp = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 7.0], [3.0, 3.0, 3.0, 3.0]])
    adv = torch.tensor([[9.0, 1.0, 1.0, 1.0], [0.0, 0.0, -2.0, 5.0], [4.0, 4.0, 4.0, 4.0]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0]])
    token, _ = ppo_clip_loss(logp, torch.zeros_like(logp), adv, mask, agg="token_mean")
    seq, _ = ppo_clip_loss(logp, torch.zeros_like(logp), adv, mask, agg="seq_mean")
    assert token.item() == pytest.approx((-1 - 1 - 1 + 2) / 4)  # -0.25
    assert seq.item() == pytest.approx((-1 + 2) / 2)  # 0.5


def test_token_weights_multiply_each_token_loss():
    logp, logp_old, mask = five_tokens()
    weights = torch.tensor([[0.0, 2.0, 1.0, 1.0, 0.5]], dtype=torch.float64)
    loss, _ = ppo_clip_loss(logp, logp_old, ADVANTAGES, mask, token_weights=weights)
    assert loss.item() == pytest.approx((0 * -1.28 + 2 * 1.5 - 0.5 + 0.8 - 0.5 * 2.2) / 5)


def test_masked_out_tokens_change_neither_loss_nor_gradient():
    mask = torch.tensor([[1, 0, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.0, 5.0, -1.0, 2.0]])

    def run(junk):
        logp = torch.tensor([[math.log(1.1), junk, math.log(0.9), junk]], requires_grad=True)
        old = torch.tensor([[0.0, -junk, 0.0, junk]])
        loss, stats = ppo_clip_loss(logp, old, adv, mask)
        loss.backward()
        return loss.detach(), logp.grad, stats

    base = run(0.0)
    for junk in (50.0, float("inf"), float("-inf"), float("nan")):
        loss, grad, stats = run(junk)
        assert torch.equal(loss, base[0]) and torch.equal(grad, base[1])
        assert all(torch.equal(stats[k], base[2][k]) for k in stats)
    assert base[1][0, 1] == 0 and base[1][0, 3] == 0


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_empty_mask_gives_zero_loss_and_zero_gradient(agg):
    logp = torch.full((2, 3), float("-inf"), requires_grad=True)
    loss, stats = ppo_clip_loss(logp, torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3), agg=agg)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logp.grad, torch.zeros(2, 3))
    assert all(torch.isfinite(v) for v in stats.values())


def test_entropy_bonus_by_hand():
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert entropy_bonus(entropy, mask, coef=0.1).item() == pytest.approx(-0.1 * (1 + 2 + 4) / 3)
    assert entropy_bonus(entropy, mask, coef=0.1, agg="seq_mean").item() == pytest.approx(-0.1 * (1.5 + 4) / 2)


def test_bad_input_is_rejected():
    logp = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="only 0 and 1"):
        ppo_clip_loss(logp, logp, logp, torch.tensor([[1.0, 0.5, 0.0]]))
    with pytest.raises(ValueError, match="advantages has shape"):
        ppo_clip_loss(logp, logp, torch.zeros(3), torch.ones(1, 3))
    with pytest.raises(ValueError, match="clip_low"):
        ppo_clip_loss(logp, logp, logp, torch.ones(1, 3), clip_low=1.0)
    with pytest.raises(ValueError, match="allowed: token_mean, seq_mean"):
        aggregate(logp, torch.ones(1, 3, dtype=torch.bool), "sum")  # type: ignore[arg-type]
