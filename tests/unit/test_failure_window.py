"""``async.max_failed_fraction``: the failed share over the last B×(G+r) finished trajectories stops a run."""

from __future__ import annotations

import pytest

from rollarc.runtime.failure_window import FailureWindow


def test_stops_only_once_the_window_is_full_and_the_share_is_above_the_bound():
    window = FailureWindow(size=8, max_fraction=0.5)
    window.add(ok=0, failed=4)  # 4 of 4 failed, but a half-empty window does not stop a run
    assert not window.exceeded() and window.failed == 4 and window.size == 4
    window.add(ok=4, failed=0)  # 4 of 8: exactly the bound, not above it
    assert not window.exceeded()
    window.add(ok=1, failed=1)  # the oldest two (failed) slide out: 3 of 8
    assert window.failed == 3 and not window.exceeded()
    window.add(ok=0, failed=4)  # [ok ok ok ok ok F F F F F] -> last 8: 3 ok, 5 failed
    assert window.failed == 5 and window.exceeded()


def test_a_run_that_recovers_is_not_stopped_by_its_past():
    window = FailureWindow(size=4, max_fraction=0.25)
    window.add(ok=0, failed=3)
    window.add(ok=4, failed=0)
    assert window.failed == 0 and not window.exceeded()


@pytest.mark.parametrize("fraction, stops", [(0.0, True), (0.99, True), (1.0, False)])
def test_bounds_zero_tolerates_nothing_and_one_never_stops(fraction, stops):
    window = FailureWindow(size=2, max_fraction=fraction)
    window.add(ok=0 if fraction > 0 else 1, failed=2 if fraction > 0 else 1)
    assert window.exceeded() is stops
