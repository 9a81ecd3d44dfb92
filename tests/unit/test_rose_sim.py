"""The cluster-scale ROSE scenario: the diurnal curve, and the speed-up against the Amdahl bound it obeys."""

from __future__ import annotations

import pytest

from rollarc.cluster.catalogue import load_catalogue
from rollarc.rayproc.placement import CATALOGUE
from rollarc.rose.sim_scenario import DAY_S, Scenario, diurnal, simulate


def test_diurnal_runs_from_trough_at_midnight_to_peak_at_noon() -> None:
    assert diurnal(0.0, 0.2) == pytest.approx(0.2)
    assert diurnal(DAY_S / 2, 0.2) == pytest.approx(1.0)
    assert diurnal(DAY_S / 4, 0.2) == pytest.approx(0.6)


def test_borrowing_speeds_rollout_but_not_training_and_more_serving_lends_more() -> None:
    gpu = load_catalogue(CATALOGUE).gpu("h800")
    small = simulate(Scenario(serving_replicas=8, dedicated_replicas=8), gpu)
    large = simulate(Scenario(serving_replicas=32, dedicated_replicas=8), gpu)
    # mean idle = 1 - 0.8 x mean(diurnal) = 1 - 0.8 x 0.6 = 0.52
    assert small.mean_idle == pytest.approx(0.52, abs=1e-3)
    assert 1.0 < small.speedup < small.rollout_speedup  # Amdahl: training is not accelerated
    assert large.rollout_speedup > small.rollout_speedup and large.speedup > small.speedup
    none = simulate(Scenario(serving_replicas=8, dedicated_replicas=8, efficiency=1e-9), gpu)
    assert none.steps_harvest <= none.steps_dedicated  # nothing lent: only the cross-site sync remains
