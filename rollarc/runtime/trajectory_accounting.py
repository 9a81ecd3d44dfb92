"""Where every started trajectory ended: the ledger that proves no trajectory goes missing.

Each group attempt the controller submits starts ``G + r`` trajectories. Each of them must end in exactly
one of four ways:

* ``done``: finished well and kept (one that finished well but was not kept, a spare not needed, is
  ``dropped`` instead);
* ``failed``: an env error, a timeout, a turn that could not be generated; counted with its reason;
* ``cancelled``: stopped on purpose (redundant ones still running once the kept ``G`` were known, groups in
  flight at the end of the run or when the trainer was lost);
* ``retried``: its EnvWorker died with it, and the group was run again under the same seed.

``lost`` is what is left: started, and none of these. It is zero unless rollarc has a bug, so the chaos
benchmark reports it. Pure bookkeeping: no Ray, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class TrajectoryAccount:
    started: int = 0
    done: int = 0
    dropped: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0
    open_groups: dict[Hashable, int] = field(default_factory=dict)

    def start(self, key: Hashable, n: int) -> None:
        """A group attempt (``key``: anything unique to it) started ``n`` trajectories."""
        if key in self.open_groups:
            raise ValueError(f"group attempt {key!r} was started twice")
        self.open_groups[key] = n
        self.started += n

    def close(self, key: Hashable, *, done: int, failed: int, cancelled: int, dropped: int = 0) -> int:
        """The attempt returned its result; returns how many of its trajectories the result leaves unaccounted."""
        n = self.open_groups.pop(key)
        accounted = done + failed + cancelled + dropped
        if accounted > n:
            raise ValueError(f"group attempt {key!r} started {n} trajectories but reports {accounted}")
        self.done += done
        self.failed += failed
        self.cancelled += cancelled
        self.dropped += dropped
        return n - accounted

    def cancel(self, key: Hashable) -> None:
        """The attempt was cancelled before it returned: all its trajectories are cancelled."""
        self.cancelled += self.open_groups.pop(key)

    def fail(self, key: Hashable) -> None:
        """The attempt raised instead of returning: all its trajectories failed."""
        self.failed += self.open_groups.pop(key)

    def retry(self, key: Hashable) -> None:
        """The attempt's worker died: its trajectories are re-run by a new attempt of the same group."""
        self.retried += self.open_groups.pop(key)

    @property
    def in_flight(self) -> int:
        return sum(self.open_groups.values())

    @property
    def lost(self) -> int:
        return self.started - self.in_flight - self.done - self.dropped - self.failed - self.cancelled - self.retried

    def as_dict(self) -> dict[str, int]:
        return {
            "started": self.started,
            "done": self.done,
            "dropped": self.dropped,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "retried": self.retried,
            "in_flight": self.in_flight,
            "lost": self.lost,
        }
