"""Group-relative advantages against hand-computed numbers, plus properties that hold for any rewards."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.algo.advantages import (
    broadcast_to_tokens,
    dr_grpo_advantages,
    group_advantages,
    grpo_advantages,
    rloo_advantages,
)

EPS = 1e-6


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grpo_sample_std_by_hand():
    # rewards [1, 0, 0, 1]: mean 0.5, deviations ±0.5, sample variance 4 * 0.25 / 3 = 1/3.
    adv = grpo_advantages(t([[1, 0, 0, 1]]), eps=EPS, std="sample")
    a = 0.5 / (math.sqrt(1 / 3) + EPS)  # = 0.86602...
    torch.testing.assert_close(adv, t([[a, -a, -a, a]]))


def test_grpo_population_std_by_hand():
    # Same rewards, population variance 4 * 0.25 / 4 = 0.25, std 0.5: advantages are ±1 (minus eps).
    adv = grpo_advantages(t([[1, 0, 0, 1]]), eps=EPS, std="population")
    a = 0.5 / (0.5 + EPS)
    torch.testing.assert_close(adv, t([[a, -a, -a, a]]))


def test_grpo_several_groups_each_normalised_on_its_own():
    # Group 2: mean 0.75, deviations [-0.75]*3 + [2.25], sample variance (3*0.5625 + 5.0625)/3 = 2.25, std 1.5.
    adv = grpo_advantages(t([[1, 0, 0, 1], [2, 2, 2, 2], [0, 0, 0, 3]]), eps=EPS)
    a, b, c = 0.5 / (math.sqrt(1 / 3) + EPS), 0.75 / (1.5 + EPS), 2.25 / (1.5 + EPS)
    torch.testing.assert_close(adv, t([[a, -a, -a, a], [0, 0, 0, 0], [-b, -b, -b, c]]))


def test_dr_grpo_by_hand():
    adv = dr_grpo_advantages(t([[1, 0, 0, 1], [0, 0, 0, 3]]))
    torch.testing.assert_close(adv, t([[0.5, -0.5, -0.5, 0.5], [-0.75, -0.75, -0.75, 2.25]]))


def test_rloo_by_hand():
    # [0,0,0,3]: the first gets 0 - (0+0+3)/3 = -1, the last 3 - (0+0+0)/3 = 3.
    # [1,0,0,1]: the first gets 1 - (0+0+1)/3 = 2/3, the second 0 - (1+0+1)/3 = -2/3.
    adv = rloo_advantages(t([[0, 0, 0, 3], [1, 0, 0, 1]]))
    torch.testing.assert_close(adv, t([[-1, -1, -1, 3], [2 / 3, -2 / 3, -2 / 3, 2 / 3]]))


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("std", ["sample", "population"])
def test_zero_variance_group_gives_exact_zeros(kind, std):
    # 0.1 is not representable: the group mean has a rounding residue that eps alone would blow up.
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.0, 0.0]], dtype=torch.float32)
    adv = group_advantages(rewards, kind, eps=1e-12, std=std)
    assert torch.equal(adv[0], torch.zeros(3))
    assert torch.isfinite(adv).all()


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
def test_a_group_shrunk_to_one_rollout_gets_zero(kind):
    adv = group_advantages(t([[0.7], [3.0]]), kind)
    assert torch.equal(adv, t([[0.0], [0.0]]))


def test_dispatcher_matches_functions_and_integer_rewards_work():
    rewards = torch.tensor([[1, 0, 0, 1]])
    torch.testing.assert_close(group_advantages(rewards, "dr_grpo"), torch.tensor([[0.5, -0.5, -0.5, 0.5]]))
    torch.testing.assert_close(group_advantages(rewards, "rloo"), torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]))


@pytest.mark.parametrize(
    "rewards, message",
    [
        (torch.tensor([1.0, 0.0]), "num_groups, group_size"),
        (torch.zeros(2, 0), "num_groups, group_size"),
        (torch.tensor([[1.0, float("nan")]]), r"rewards\[0, 1\] = nan"),
    ],
)
def test_bad_rewards_are_rejected_with_a_clear_message(rewards, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, "grpo")


def test_unknown_kind_and_std_are_rejected():
    with pytest.raises(ValueError, match="allowed: grpo, dr_grpo, rloo"):
        group_advantages(t([[1, 0]]), "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed: sample, population"):
        grpo_advantages(t([[1, 0]]), std="biased")  # type: ignore[arg-type]


def test_broadcast_to_tokens_by_hand():
    mask = torch.tensor([[0, 1, 1], [0, 0, 1]])
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    assert torch.equal(out, torch.tensor([[0.0, 2.0, 2.0], [0.0, 0.0, -1.0]]))
    with pytest.raises(ValueError, match="batch"):
        broadcast_to_tokens(torch.tensor([2.0]), mask)


reward_groups = st.integers(2, 6).flatmap(
    lambda g: st.lists(st.lists(st.integers(-5, 5), min_size=g, max_size=g), min_size=1, max_size=4)
)


@settings(max_examples=60, deadline=None)
@given(reward_groups)
def test_population_grpo_gives_z_scores(rows):
    rewards = t(rows)
    adv = grpo_advantages(rewards, eps=1e-12, std="population")
    varied = rewards.std(dim=1) > 0
    for row in adv[varied]:
        assert row.mean().item() == pytest.approx(0.0, abs=1e-9)
        assert row.std(correction=0).item() == pytest.approx(1.0)
    assert torch.equal(adv[~varied], torch.zeros_like(adv[~varied]))


@settings(max_examples=60, deadline=None)
@given(reward_groups, st.floats(0.1, 10), st.floats(-10, 10))
def test_grpo_ignores_reward_scale_and_shift_rloo_is_scaled_dr_grpo(rows, scale, shift):
    rewards = t(rows)
    group_size = rewards.shape[1]
    torch.testing.assert_close(grpo_advantages(rewards * scale + shift, eps=1e-12), grpo_advantages(rewards, eps=1e-12))
    torch.testing.assert_close(rloo_advantages(rewards), group_size / (group_size - 1) * dr_grpo_advantages(rewards))
