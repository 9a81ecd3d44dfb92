"""A spot scenario at cluster scale: an explorer fleet under published preemption rates, its time and cost.

Each explorer slot alternates between up and replaced: Poisson preemptions at ``rate_per_hour`` per
node; a preempted node is gone ``notice_s`` after the notice and its replacement starts
``replacement_s`` later. With the pull scheduler the fleet never idles while jobs wait, so the fleet's
useful work is the sum over slots of their up time minus the work lost: nothing when the notice is at
least one denoising step (the in-flight latent is committed), otherwise the steps since the job's start
(uniform over a job: half a job on average) plus the lease that must expire before the job is requeued.

Monte Carlo over slots (vectorised, seeded): ``simulate_fleet`` returns the fleet's effective capacity
(useful explorer-hours per paid explorer-hour) and ``cost_ratio`` turns it into the on-demand / spot cost
ratio of a run whose trainer and samplers stay on demand.

Published rates used by ``rollarc bench spot``: the AWS Spot Instance Advisor's interruption-frequency
bands (below 5 % up to above 20 % of instances interrupted per month), with AWS's two-minute notice;
Google Cloud spot VMs give 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class FleetCapacity:
    slots: int
    hours: float
    preemptions: int
    paid_hours: float
    useful_hours: float

    @property
    def useful_fraction(self) -> float:
        """Useful explorer-hours per slot-hour: the fleet's speed relative to an on-demand fleet."""
        return self.useful_hours / (self.slots * self.hours)

    @property
    def paid_fraction(self) -> float:
        """Billed explorer-hours per slot-hour (an empty slot awaiting its replacement is not billed)."""
        return self.paid_hours / (self.slots * self.hours)


def monthly_to_hourly(fraction_per_month: float) -> float:
    """A per-month interruption frequency as a Poisson rate per node-hour."""
    if not 0 <= fraction_per_month < 1:
        raise ValueError(f"an interruption frequency per month is in [0, 1), got {fraction_per_month}")
    return -float(np.log1p(-fraction_per_month)) / HOURS_PER_MONTH


def simulate_fleet(
    slots: int,
    hours: float,
    rate_per_hour: float,
    notice_s: float,
    replacement_s: float,
    step_s: float,
    job_steps: int,
    lease_s: float,
    seed: int,
) -> FleetCapacity:
    """Capacity of ``slots`` explorer nodes over ``hours`` under Poisson preemptions (see the module docstring)."""
    rng = np.random.default_rng(seed)
    horizon = hours * 3600.0
    counts = rng.poisson(rate_per_hour * hours, size=slots)
    preemptions = int(counts.sum())
    # A noticed node keeps working (and commits) during its notice; the slot is empty for replacement_s.
    down = min(preemptions * replacement_s, slots * horizon)
    paid = slots * horizon - down  # a replacement is billed from when it starts
    if notice_s >= step_s or preemptions == 0:
        lost = 0.0
    else:  # the steps since the job started, then the lease until the job is requeued
        lost = float(rng.uniform(0, job_steps * step_s, size=preemptions).sum()) + preemptions * lease_s
    useful = max(paid - lost, 0.0)
    return FleetCapacity(slots, hours, preemptions, paid / 3600.0, useful / 3600.0)


def cost_ratio(on_demand_units: float, explorers: int, spot_factor: float, fleet: FleetCapacity) -> float:
    """On-demand-only cost over spot-exploration cost for the same exploration work.

    The spot fleet does ``useful_fraction`` of an on-demand fleet's work per hour, so the run is
    ``1 / useful_fraction`` longer when exploration is on the critical path (assumed: the conservative
    case); the on-demand roles pay for all of it, the explorers for their billed fraction at spot price.
    """
    if fleet.useful_fraction <= 0:
        raise ValueError("a fleet with no useful capacity has no cost ratio")
    on_demand = on_demand_units + explorers
    spot = (on_demand_units + explorers * fleet.paid_fraction * spot_factor) / fleet.useful_fraction
    return on_demand / spot
