"""Spotlight's pure parts against hand-computed numbers: group selection, Kendall τ, the budget split."""

import itertools
import math

import pytest

from rollarc.spotlight.budget import plan_candidates, split_by_score
from rollarc.spotlight.groups import choose_groups, exploration_stats
from rollarc.spotlight.kendall import kendall_tau
from rollarc.spotlight.selection import max_contrast_subset, population_variance


def test_max_contrast_subset_by_hand():
    rewards = [0.5, 0.9, 0.1, 0.5, 0.0]
    assert max_contrast_subset(rewards, 2) == [1, 4]
    # size 3: {.9,.1,0} has variance .162, {.9,.5,0} .136, {.9,.5,.5} .036
    assert max_contrast_subset(rewards, 3) == [1, 2, 4]
    assert population_variance([0.9, 0.1, 0.0]) == pytest.approx(0.48667 / 3, abs=1e-4)


def test_max_contrast_subset_beats_every_other_subset():
    rewards = [0.3, 0.7, 0.2, 0.9, 0.4, 0.41, 0.0, 1.0]
    best = max(population_variance([rewards[i] for i in c]) for c in itertools.combinations(range(8), 4))
    chosen = max_contrast_subset(rewards, 4)
    assert population_variance([rewards[i] for i in chosen]) == pytest.approx(best)


def test_kendall_tau_by_hand():
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # a tie on the left: C=2, D=0, τ-b = 2 / sqrt(3·2)
    assert kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None


def test_split_by_score_by_hand():
    assert split_by_score([1.0, 3.0], 4) == [1, 3]
    assert split_by_score([1.0, 1.0, 1.0], 4) == [2, 1, 1]
    assert split_by_score([math.inf, 2.0, math.inf], 3) == [2, 0, 1]
    assert split_by_score([0.0, -1.0], 2) == [1, 1]


def test_plan_candidates_by_hand():
    # weights .03, .01, 0, .02 of 48 images, G 4, chunk 4: the zero is dropped; shares 24, 8, 16 all >= 8;
    # 9 extra chunks, one each first, the other 6 split 3:1:2
    assert plan_candidates([0.03, 0.01, 0.0, 0.02], 48, 4, 4) == [20, 12, 0, 16]
    # shares of .05, .01, .04 over 30 images: 15, 3, 12; the weakest (3 < 8) is dropped, then 16.7 and 13.3;
    # 5 extra chunks: one each, the other 3 split .05:.04 -> exact 1.67, 1.33 -> 2, 1
    assert plan_candidates([0.05, 0.01, 0.04], 30, 4, 4) == [16, 0, 12]
    # nothing scores above 0: every prompt counts alike (a uniform split, 12 each)
    assert plan_candidates([0.0, -0.01, 0.0], 36, 4, 4) == [12, 12, 12]
    # too small a budget for even one useful exploration: nothing is explored
    assert plan_candidates([1.0, 1.0], 7, 4, 4) == [0, 0]
    # equal scores whose shares are too small: the later prompt is dropped first
    assert plan_candidates([1.0, 1.0, 1.0], 20, 4, 4) == [12, 8, 0]


def test_plan_candidates_never_overspends_and_explores_usefully():
    for scores in ([0.3, 0.1, 0.0, 0.2, 0.05], [1.0] * 8, [0.001, 0.5, 0.5]):
        for budget in (0, 9, 24, 50, 96):
            plan = plan_candidates(scores, budget, 4, 4)
            assert sum(plan) <= budget
            assert all(n == 0 or (n >= 8 and (n - 4) % 4 == 0) for n in plan)


def test_plan_candidates_rejects_infinite_scores():
    with pytest.raises(ValueError, match="finite"):
        plan_candidates([math.inf, 1.0], 24, 4, 4)


def test_choose_groups_falls_back_for_unexplored_prompts():
    seeds, stale = choose_groups([[11, 12, 13, 14], []], [[0.1, 0.9, 0.5, 0.0], []], [[1, 2], [5, 6]], 2)
    assert seeds == [[12, 14], [5, 6]]
    assert stale == [[0.9, 0.0], None]
    with pytest.raises(ValueError, match="stale rewards"):
        choose_groups([[1, 2]], [[0.5]], [[1, 2]], 2)


def test_exploration_stats_by_hand():
    stale = [[0.0, 1.0, 0.5, 0.5], []]
    chosen = [[0.0, 1.0], None]
    fresh = [[0.2, 0.8], [0.3, 0.3]]
    out = exploration_stats(stale, chosen, fresh, 2)
    assert out["kendall_tau"] == pytest.approx(1.0)
    assert out["chosen_var_stale"] == pytest.approx(0.25)
    assert out["chosen_var_fresh"] == pytest.approx(0.09)
    assert out["random_var_stale"] == pytest.approx(0.25)
    assert out["explored_fraction"] == 0.5
    assert (out["candidates_min"], out["candidates_max"], out["candidates_std"]) == (0.0, 4.0, 2.0)
