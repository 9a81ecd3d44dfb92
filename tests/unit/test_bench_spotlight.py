"""``rollarc bench spotlight``'s bookkeeping: time to target from a run's evaluations."""

from rollarc.bench.spotlight import first_reach, mean_or_none


def test_first_reach_skips_step_zero_and_takes_the_first_crossing():
    evals = [
        {"step": 0, "reward": 0.9, "rl_wall_s": 0.0},
        {"step": 2, "reward": 0.4, "rl_wall_s": 3.0},
        {"step": 4, "reward": 0.6, "rl_wall_s": 6.5},
        {"step": 6, "reward": 0.7, "rl_wall_s": 9.0},
    ]
    assert first_reach(evals, 0.55) == (6.5, 4)
    assert first_reach(evals, 0.95) == (None, None)


def test_mean_or_none_ignores_runs_that_never_reached():
    assert mean_or_none([2.0, None, 4.0]) == 3.0
    assert mean_or_none([None]) is None
