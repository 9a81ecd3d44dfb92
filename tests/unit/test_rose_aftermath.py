"""The ratio by which the guard scales the serving step after a rollout step (hand-computed)."""

from __future__ import annotations

import pytest

from rollarc.rose.aftermath import AftermathRatio


def test_no_scaling_until_enough_steps_are_seen() -> None:
    ratio = AftermathRatio(decay=1.0, min_samples=3)
    ratio.observe(0.030, 0.010)
    ratio.observe(0.030, 0.010)
    assert ratio.factor == 1.0
    ratio.observe(0.030, 0.010)
    assert ratio.factor == pytest.approx(3.0)


def test_the_ratio_forgets_the_past_and_stays_in_one_to_cap() -> None:
    ratio = AftermathRatio(decay=0.5, min_samples=1, cap=3.0)
    ratio.observe(0.020, 0.010)  # measured 0.020, predicted 0.010
    ratio.observe(0.010, 0.010)  # 0.5 * 0.020 + 0.010 = 0.020 over 0.5 * 0.010 + 0.010 = 0.015
    assert ratio.factor == pytest.approx(0.020 / 0.015)
    ratio.observe(0.001, 0.010)  # 0.011 over 0.0175: below 1, so 1
    assert ratio.factor == 1.0
    ratio.observe(0.500, 0.010)  # 0.5055 over 0.01875: capped
    assert ratio.factor == 3.0


def test_a_model_that_predicts_nothing_gives_no_scaling() -> None:
    ratio = AftermathRatio(min_samples=1)
    ratio.observe(0.010, 0.0)
    assert ratio.factor == 1.0
