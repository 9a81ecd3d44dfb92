"""Off-policy corrections and the policy_loss entry point: hand-computed weights, anchors and gradients."""

import math

import pytest
import torch

from rollarc.algo import LossConfig, policy_loss, token_logprobs
from rollarc.algo.off_policy import correction_terms, decoupled_weights, needs_proximal_logprobs, tis_weights


def logs(*values):
    return torch.tensor([[math.log(v) for v in values]], dtype=torch.float64)


# pi_prox / pi_behav per token = [1.5, 3, 0.5, 1].
BEHAV = logs(0.2, 0.1, 0.4, 0.3)
PROX = logs(0.3, 0.3, 0.2, 0.3)
ADV = torch.tensor([[1.0, 1.0, -1.0, 2.0]], dtype=torch.float64)
MASK = torch.ones(1, 4, dtype=torch.bool)


def test_which_corrections_need_recomputed_logprobs():
    assert [needs_proximal_logprobs(c) for c in ("none", "tis", "decoupled_ppo")] == [False, True, True]
    with pytest.raises(ValueError, match="allowed: none, tis, decoupled_ppo"):
        needs_proximal_logprobs("is")  # type: ignore[arg-type]


def test_tis_truncates_and_decoupled_drops_beyond_the_cap():
    def row(*values):
        return torch.tensor([values], dtype=torch.float64)

    torch.testing.assert_close(tis_weights(PROX, BEHAV, cap=2.0), row(1.5, 2.0, 0.5, 1.0))
    torch.testing.assert_close(decoupled_weights(PROX, BEHAV), row(1.5, 3.0, 0.5, 1.0))
    torch.testing.assert_close(decoupled_weights(PROX, BEHAV, cap=2.0), row(1.5, 0.0, 0.5, 1.0))
    assert tis_weights(torch.tensor([0.0]), torch.tensor([-1000.0]), cap=2.0).item() == 2.0  # exp overflow -> cap


def test_anchor_is_behaviour_for_none_and_proximal_otherwise():
    anchor, weights = correction_terms("none", BEHAV, None)
    assert torch.equal(anchor, BEHAV) and weights is None
    anchor, _ = correction_terms("decoupled_ppo", BEHAV, PROX)
    assert torch.equal(anchor, PROX)
    with pytest.raises(ValueError, match="needs logp_prox"):
        correction_terms("tis", BEHAV, None)


@pytest.mark.parametrize(
    "cfg, expected",
    [
        # theta = prox, so rho = 1 and each token's loss is -w * A, averaged over the 4 tokens.
        (LossConfig(correction="tis"), (-1.5 * 1 - 2.0 * 1 + 0.5 * 1 - 1.0 * 2) / 4),  # -1.25
        (LossConfig(correction="decoupled_ppo"), (-1.5 - 3.0 + 0.5 - 2.0) / 4),  # -1.5
        # The token with weight 3 > cap is dropped but stays in the denominator.
        (LossConfig(correction="decoupled_ppo", decoupled_cap=2.0), (-1.5 + 0.0 + 0.5 - 2.0) / 4),  # -0.75
    ],
)
def test_corrections_at_the_proximal_policy_by_hand(cfg, expected):
    logp = PROX.clone().requires_grad_(True)
    loss, stats = policy_loss(logp, BEHAV, PROX, ADV, MASK, cfg)
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    weights = {"tis": [1.5, 2.0, 0.5, 1.0], "decoupled_ppo": [1.5, 3.0 if cfg.decoupled_cap is None else 0.0, 0.5, 1.0]}
    expected_grad = -torch.tensor([weights[cfg.correction]], dtype=torch.float64) * ADV / 4
    torch.testing.assert_close(logp.grad, expected_grad)
    assert stats["behav_ratio_max"].item() == pytest.approx(3.0)


def test_decoupled_clips_against_prox_and_none_against_behaviour():
    # One token: pi_theta/pi_prox = 1.5, pi_prox/pi_behav = 2, A = 1, clip_high 0.28.
    behav, prox, logp = logs(0.1), logs(0.2), logs(0.3)
    adv, mask = torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1)
    decoupled, _ = policy_loss(logp, behav, prox, adv, mask, LossConfig(correction="decoupled_ppo"))
    plain, _ = policy_loss(logp, behav, None, adv, mask, LossConfig())
    assert decoupled.item() == pytest.approx(-2 * 1.28)  # weight 2 times the clip at 1.28 of rho 1.5
    assert plain.item() == pytest.approx(-1.28)  # rho = 0.3/0.1 = 3, clipped at 1.28


def test_off_policy_stats_by_hand():
    _, stats = policy_loss(PROX, BEHAV, PROX, ADV, MASK, LossConfig(correction="tis"))
    # k3 of KL(behav || prox) per token is (w - 1) - ln w with w = prox/behav.
    k3 = [(w - 1) - math.log(w) for w in (1.5, 3.0, 0.5, 1.0)]
    assert stats["behav_kl"].item() == pytest.approx(sum(k3) / 4)
    assert stats["behav_ratio_mean"].item() == pytest.approx((1.5 + 3 + 0.5 + 1) / 4)
    assert stats["is_weight_mean"].item() == pytest.approx((1.5 + 2 + 0.5 + 1) / 4)
    assert stats["is_capped_frac"].item() == pytest.approx(1 / 4)


def test_kl_and_entropy_terms_by_hand():
    # One token, A = 0 so the PPO term is 0. k3 with ref - logp = ln(1/4) - ln(1/2) = -ln2 is ln2 - 1/2.
    logp, ref, entropy = logs(0.5), logs(0.25), torch.tensor([[0.7]], dtype=torch.float64)
    zero, mask = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1)
    cfg = LossConfig(kl_coef=0.1, entropy_coef=0.01)
    loss, stats = policy_loss(logp, logp, None, zero, mask, cfg, ref_logp=ref, entropy=entropy)
    assert loss.item() == pytest.approx(0.1 * (math.log(2) - 0.5) - 0.01 * 0.7)
    assert stats["kl_ref"].item() == pytest.approx(math.log(2) - 0.5)
    reported, _ = policy_loss(logp, logp, None, zero, mask, LossConfig(), ref_logp=ref, entropy=entropy)
    assert reported.item() == 0.0  # with zero coefficients they are only reported
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(logp, logp, None, zero, mask, LossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="needs the per-token entropy"):
        policy_loss(logp, logp, None, zero, mask, LossConfig(entropy_coef=0.1))


def tiny_policy_logprobs(seed: int = 0):
    """A linear 'LM' over a 5-token vocabulary: enough to test gradients through real parameters."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(5, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(3, 7, 4, generator=generator, dtype=torch.float64)
    ids = torch.randint(0, 5, (3, 7), generator=generator)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 0]], dtype=torch.bool)
    return weight, token_logprobs((hidden @ weight.T)[:, :-1], ids[:, 1:]), mask


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_on_policy_gradient_equals_reinforce(agg):
    weight, logp, mask = tiny_policy_logprobs()
    adv = torch.tensor([[1.5], [-0.5], [2.0]], dtype=torch.float64).expand(3, 6) * mask
    loss, _ = policy_loss(logp, logp.detach(), None, adv, mask, LossConfig(agg=agg))
    (ppo_grad,) = torch.autograd.grad(loss, weight, retain_graph=True)
    per_token = -adv * logp * mask
    lengths = mask.sum(1)
    reinforce = per_token.sum() / mask.sum() if agg == "token_mean" else (per_token.sum(1) / lengths).mean()
    (reinforce_grad,) = torch.autograd.grad(reinforce, weight)
    torch.testing.assert_close(ppo_grad, reinforce_grad)
    assert ppo_grad.abs().sum() > 0


def test_tis_at_the_proximal_policy_is_weighted_reinforce():
    weight, logp, mask = tiny_policy_logprobs(seed=1)
    adv = torch.tensor([[1.0], [-1.0], [0.5]], dtype=torch.float64).expand(3, 6) * mask
    behav = logp.detach() - torch.tensor([[0.1], [1.0], [-0.3]], dtype=torch.float64)  # w = e^0.1, min(e^1, 2), e^-0.3
    loss, _ = policy_loss(logp, behav, logp.detach(), adv, mask, LossConfig(correction="tis"))
    (grad,) = torch.autograd.grad(loss, weight, retain_graph=True)
    w = torch.tensor([[math.exp(0.1)], [2.0], [math.exp(-0.3)]], dtype=torch.float64)
    (expected,) = torch.autograd.grad((-w * adv * logp * mask).sum() / mask.sum(), weight)
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("correction", ["none", "tis", "decoupled_ppo"])
def test_masked_out_tokens_never_matter_in_any_correction(correction):
    mask = torch.tensor([[0, 1, 1, 0]], dtype=torch.bool)
    cfg = LossConfig(correction=correction, kl_coef=0.1)

    def run(junk):
        logp = torch.tensor([[junk, math.log(0.5), math.log(0.2), junk]], requires_grad=True)
        behav = torch.tensor([[-junk, math.log(0.4), math.log(0.3), junk]])
        prox = torch.tensor([[junk, math.log(0.45), math.log(0.25), -junk]])
        adv = torch.tensor([[junk, 1.0, -1.0, junk]])
        loss, _ = policy_loss(logp, behav, prox, adv, mask, cfg, ref_logp=behav)
        loss.backward()
        return loss.detach(), logp.grad

    base_loss, base_grad = run(0.0)
    for junk in (80.0, float("inf"), float("-inf"), float("nan")):
        loss, grad = run(junk)
        assert torch.equal(loss, base_loss) and torch.equal(grad, base_grad)


def test_shape_mismatch_names_the_tensor():
    with pytest.raises(ValueError, match="logp_prox has shape"):
        policy_loss(PROX, BEHAV, torch.zeros(4), ADV, MASK, LossConfig(correction="tis"))
