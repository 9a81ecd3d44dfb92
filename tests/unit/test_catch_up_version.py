"""A replica replaced mid-run may catch up one version ahead of the controller (the harvest chaos run's stop)."""

import pytest

from rollarc.runtime.workers import check_caught_up


def test_a_replacement_may_hold_the_published_version_or_the_one_a_training_step_just_published():
    check_caught_up("rollout-0.2", 5, 5)
    check_caught_up("rollout-0.2", 6, 5)  # before: RuntimeError, and the harvest chaos run stopped at step 5


@pytest.mark.parametrize("caught_up", [4, 7])
def test_any_other_version_is_a_bug_in_one_line(caught_up):
    with pytest.raises(
        RuntimeError, match=rf"^rollout replica rollout-0.2 caught up to version {caught_up}, expected 5 or 6$"
    ):
        check_caught_up("rollout-0.2", caught_up, 5)
