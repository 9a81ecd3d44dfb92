"""The cluster-scale spot scenario: rates, capacity by hand, and the cost ratio's bound."""

import math

import pytest

from rollarc.sim.spot import FleetCapacity, cost_ratio, monthly_to_hourly, simulate_fleet


def test_monthly_frequency_to_hourly_rate():
    assert monthly_to_hourly(0.0) == 0.0
    assert monthly_to_hourly(0.2) == pytest.approx(-math.log(0.8) / 730.0)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        monthly_to_hourly(1.0)


def test_no_preemption_is_full_capacity_and_notice_loses_nothing():
    calm = simulate_fleet(10, 5.0, 0.0, 120, 60, 0.5, 20, 30, seed=0)
    assert (calm.preemptions, calm.paid_hours, calm.useful_fraction) == (0, 50.0, 1.0)
    noticed = simulate_fleet(100, 10.0, 0.5, 120, 60, 0.5, 20, 30, seed=0)
    assert noticed.preemptions > 0
    assert noticed.useful_hours == noticed.paid_hours  # every in-flight latent committed
    assert noticed.paid_hours == pytest.approx(1000.0 - noticed.preemptions * 60 / 3600)


def test_no_notice_loses_the_partial_job_and_the_lease():
    fleet = simulate_fleet(100, 10.0, 0.5, 0.0, 60, 0.5, 20, 30, seed=1)
    lost_s = (fleet.paid_hours - fleet.useful_hours) * 3600
    # per preemption: uniform over a 10 s job (mean 5 s) plus a 30 s lease
    assert lost_s / fleet.preemptions == pytest.approx(35.0, abs=1.0)


def test_cost_ratio_by_hand_and_its_bound():
    full = FleetCapacity(2, 1.0, 0, 2.0, 2.0)
    # 2 on-demand units, 2 explorers at spot factor 0.27, no loss: 4 / (2 + 0.54)
    assert cost_ratio(2, 2, 0.27, full) == pytest.approx(4 / 2.54)
    # 10 % of slot time empty (unbilled) and 20 % of it useless: 4 / ((2 + 2 · 0.9 · 0.27) / 0.8)
    assert cost_ratio(2, 2, 0.27, FleetCapacity(2, 1.0, 3, 1.8, 1.6)) == pytest.approx(4 * 0.8 / (2 + 0.486))
    assert cost_ratio(1, 10_000, 0.27, FleetCapacity(10_000, 1.0, 0, 1e4, 1e4)) < 1 / 0.27  # never beats all-spot
