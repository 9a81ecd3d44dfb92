"""Spotlight's pure parts against hand-computed numbers: group selection, Kendall τ, the UCB planner."""

import itertools
import math

import pytest

from rollarc.spotlight.bandit import UcbPlanner, split_by_score
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


def test_ucb_planner_by_hand():
    planner = UcbPlanner(exploration=0.05)
    planner.observe("a", 0.2)
    planner.observe("a", 0.4)
    planner.observe("b", 0.1)
    assert planner.score("a") == pytest.approx(0.3 + 0.05 * math.sqrt(math.log(3) / 2))
    assert planner.score("b") == pytest.approx(0.1 + 0.05 * math.sqrt(math.log(3) / 1))
    assert planner.score("c") == math.inf
    assert planner.allocate(["a", "c", "b"], 4) == [0, 4, 0]
    sa, sb = planner.score("a"), planner.score("b")
    exact = [6 * sa / (sa + sb), 6 * sb / (sa + sb)]
    assert planner.allocate(["a", "b"], 6) == [round(exact[0]), round(exact[1])]
