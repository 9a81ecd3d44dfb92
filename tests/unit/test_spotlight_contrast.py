"""The contrast planner against hand-computed numbers: observed contrast, its moving average, the budget split."""

import math

import pytest

from rollarc.spotlight.contrast import ContrastPlanner, observed_contrast


def test_observed_contrast_by_hand():
    # explored: the std of the candidates [0, 1, 0, 1] is 0.5 (the trained group is not looked at)
    assert observed_contrast([0.0, 1.0, 0.0, 1.0], [0.3, 0.3]) == pytest.approx(0.5)
    # not explored: the trained group's std; [0, 0, 0, 1] has mean 0.25, variance 0.1875
    assert observed_contrast([], [0.0, 0.0, 0.0, 1.0]) == pytest.approx(math.sqrt(0.1875))
    # a group that all scores alike has no contrast (no gradient): score 0
    assert observed_contrast([], [0.5, 0.5, 0.5]) == 0.0


def test_the_score_is_a_moving_average_of_the_observations():
    planner = ContrastPlanner(decay=0.5)
    planner.observe("a", 0.4)
    assert planner.arms["a"].score == pytest.approx(0.4)  # the first observation is taken as is
    planner.observe("a", 0.2)
    planner.observe("a", 0.0)
    # 0.5·0.4 + 0.5·0.2 = 0.3, then 0.5·0.3 + 0.5·0 = 0.15
    assert planner.arms["a"].score == pytest.approx(0.15) and planner.arms["a"].observations == 3
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\)"):
        ContrastPlanner(decay=1.0)


def test_unseen_arms_take_the_best_seen_score():
    planner = ContrastPlanner()
    assert planner.step_scores(["x", "y"]) == [1.0, 1.0]
    planner.observe("a", 0.3)
    planner.observe("b", 0.1)
    assert planner.step_scores(["b", "c", "a"]) == pytest.approx([0.1, 0.3, 0.3])


def test_allocate_by_hand():
    planner = ContrastPlanner()
    planner.observe("a", 0.3)
    planner.observe("b", 0.0)  # a prompt whose seeds all scored alike: not explored
    # scores [.3, 0, .3] (c unseen takes a's); 36 images, G 4, chunk 4: b dropped, 7 extra chunks,
    # one each, the other 5 split 1:1 -> 2.5, 2.5 -> 3, 2 (the tie to the earlier prompt)
    assert planner.allocate(["a", "b", "c"], 36, 4, 4) == [20, 0, 16]


def test_observe_step_sees_explored_and_unexplored_prompts():
    planner = ContrastPlanner(decay=0.5)
    stale = [[0.0, 1.0, 0.0, 1.0, 0.0, 1.0], []]  # a explored with 6 candidates, b not explored
    fresh = [[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]
    planner.observe_step(["a", "b"], stale, fresh)
    assert planner.arms["a"].score == pytest.approx(0.5)  # its candidates' std
    assert planner.arms["b"].score == pytest.approx(math.sqrt(0.1875))  # its trained group's std


def test_state_round_trips():
    planner = ContrastPlanner(decay=0.25)
    planner.observe("a", 0.2)
    planner.observe("a", 0.6)
    again = ContrastPlanner(decay=0.25)
    again.load(planner.state())
    assert again.arms == planner.arms and again.state() == {"a": [2, pytest.approx(0.25 * 0.2 + 0.75 * 0.6)]}
