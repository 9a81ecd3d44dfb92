"""The staleness rule, written once (docs/async.md).

A training step that starts from policy version ``u`` publishes ``u + 1``. A group trained by that
step has staleness ``u − min_version``, its oldest token's version; with bound ``k`` it may be trained
only if that is at most ``k``. The runtime, the simulator and the planner's analytic step estimate
all use these functions.
"""

from __future__ import annotations


def staleness(train_version: int, min_version: int) -> int:
    """Versions between a group's oldest token and the step that trains it."""
    return train_version - min_version


def is_fresh(train_version: int, min_version: int, max_staleness: int) -> bool:
    """Whether the step starting from ``train_version`` may train a group whose oldest token is ``min_version``."""
    return staleness(train_version, min_version) <= max_staleness


def max_in_flight_groups(groups_per_step: int, max_staleness: int) -> int:
    """Admitted, not yet trained groups never exceed ``(k + 1) · B`` (the admission rule's bound)."""
    return (max_staleness + 1) * groups_per_step


def steps_spanned(max_staleness: int) -> int:
    """How many training steps a trajectory's generation may overlap: ``k + 1`` (``k = 0``: one, synchronous)."""
    return max_staleness + 1
