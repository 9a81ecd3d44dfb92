"""Which spot workers a Ray node drain notices (pure; the polling is ``rollarc.diffusion.drain_watcher``).

Ray reports draining nodes as ``{node id hex: deadline in ms since the epoch}`` (0: no deadline), the map
Ray Serve and Ray Train v2 poll. Every worker on a draining node gets Spotlight's notice once: a node that
drains stays draining until it is gone, so a worker already noticed is not noticed again.
"""

from __future__ import annotations

from collections.abc import Mapping, Set


def to_notice(draining: Mapping[str, int], worker_nodes: Mapping[str, str], noticed: Set[str]) -> list[str]:
    """The workers (sorted) whose node is in ``draining`` and that are not in ``noticed`` yet.

    ``worker_nodes``: worker name -> the id (hex) of the Ray node it runs on.
    """
    return sorted(w for w, node in worker_nodes.items() if node in draining and w not in noticed)


def seconds_left(deadline_ms: int, now_s: float) -> float | None:
    """Seconds from ``now_s`` (epoch) to a drain's deadline; None for a drain without one (deadline 0)."""
    return None if deadline_ms <= 0 else max(0.0, deadline_ms / 1000.0 - now_s)
