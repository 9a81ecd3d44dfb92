"""``rollarc bench spotlight``'s bookkeeping: curves from a run's evaluations, medians and spreads, step means."""

import pytest

from rollarc.bench.spotlight import curves, step_means, summarise
from rollarc.bench.time_to_target import first_crossing, select_target

EVALS = [
    {"step": 2, "reward": 0.40, "rl_wall_s": 3.0},
    {"step": 0, "reward": 0.50, "rl_wall_s": 0.0},
    {"step": 4, "reward": 0.60, "rl_wall_s": 6.5},
    {"step": 6, "reward": 0.70, "rl_wall_s": 9.0},
]


def test_curves_in_step_order_by_time_and_by_step():
    by_time, by_step = curves(EVALS)
    assert by_time == [(0.0, 0.5), (3.0, 0.4), (6.5, 0.6), (9.0, 0.7)]
    assert by_step == [(0.0, 0.5), (2.0, 0.4), (4.0, 0.6), (6.0, 0.7)]
    # the target sits at 0.8 of the lowest baseline gain: 0.5 + 0.8 * (0.7 - 0.5) = 0.66, reached at step 6
    target = select_target(0.5, [by_time], 0.8)
    assert target == pytest.approx(0.66)
    assert first_crossing(by_step, target) == 6.0


def test_summarise_counts_a_miss_as_infinite():
    assert summarise([2.0, 4.0]) == {"median": 3.0, "spread": [2.0, 4.0]}
    assert summarise([2.0, None, 4.0]) == {"median": 4.0, "spread": [2.0, None]}
    assert summarise([None, None, 4.0]) == {"median": None, "spread": [4.0, None]}


def test_step_means_skip_steps_without_the_metric():
    rows = [{"low_contrast_fraction": 0.5, "candidates_std": None}, {"low_contrast_fraction": 0.25}]
    out = step_means(rows)
    assert out["low_contrast_fraction"] == 0.375
    assert out["candidates_std"] is None
