"""When a co-serving replica is lent to the policy's rollouts, and when it is withdrawn.

The driver asks each co-serving replica for its headroom (``CoServingExecutor.capacity``: the rollout turns the
SLO guard admits now, bounded by memory) every ``poll_s``. A replica is **lent** once its headroom has stayed
at or above ``min_capacity`` for ``lend_after_s``, and **withdrawn** once a lent replica has reported no
headroom for ``withdraw_after_s``. The hysteresis keeps a replica from flapping in and out of the router
on every serving request. A policy with ``lends`` false never lends (``harvest.lend: false``: a replica that
only serves, the baseline with the same serving load and nothing borrowed). Pure: the caller passes the clock.
A replica that dies takes its policy with it (the HarvestPool drops it); its replacement starts a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Decision = Literal["lend", "withdraw"]
Action = Literal["lend", "withdraw", "resize"]


@dataclass
class LendingPolicy:
    lend_after_s: float
    withdraw_after_s: float
    min_capacity: int = 1
    lends: bool = True
    lent: bool = False
    _ok_since: float | None = None  # headroom >= min_capacity without a break since then
    _dry_since: float | None = None  # no headroom at all without a break since then

    def observe(self, now: float, capacity: int) -> Decision | None:
        """One headroom report; returns what to do now (the caller acts, then the policy's ``lent`` is updated)."""
        if capacity >= self.min_capacity:
            self._ok_since = now if self._ok_since is None else self._ok_since
        else:
            self._ok_since = None
        if capacity <= 0:
            self._dry_since = now if self._dry_since is None else self._dry_since
        else:
            self._dry_since = None
        if self.lends and not self.lent and self._ok_since is not None and now - self._ok_since >= self.lend_after_s:
            self.lent = True
            return "lend"
        if self.lent and self._dry_since is not None and now - self._dry_since >= self.withdraw_after_s:
            self.lent = False
            self._ok_since = None
            return "withdraw"
        return None

    def step(self, now: float, capacity: int) -> Action | None:
        """One headroom report and what the router is told: ``lend`` (add the replica to the borrowed pool at
        ``capacity``), ``withdraw`` (take it out), ``resize`` (a lent replica's capacity follows its headroom
        between decisions) or nothing (not lent). The HarvestPool and the replay driver both act on this."""
        decision = self.observe(now, capacity)
        if decision is None and self.lent:
            return "resize"
        return decision
