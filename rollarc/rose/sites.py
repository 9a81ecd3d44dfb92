"""Cross-site weight delivery to borrowed workers, hop by hop: one sparse delta crosses into each site, then
fans out inside it along the relay's route (``rollarc.sync.topology``), and a receiver that fell behind
gets a full copy from the origin instead.

Pure accounting, no Ray: :func:`plan_hops` lists every hop with its bytes, so the cross-site and in-site
traffic of one policy version can be reported (and compared with sending a full copy to every remote
worker) before anything is sent: a model. Training's borrowed site relays shards instead
(``rollarc.runtime.site_relay``), and ``rollarc bench weightsync`` measures that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rollarc.sync.topology import Route, Topology, plan_routes


@dataclass(frozen=True)
class Hop:
    source: str  # "origin" or a member
    target: str
    nbytes: int
    cross_site: bool
    full: bool  # a full copy (the receiver fell behind), not a delta


def plan_hops(
    sites: Mapping[str, Sequence[str]],
    origin_site: str,
    delta_bytes: int,
    full_bytes: int,
    *,
    behind: frozenset[str] = frozenset(),
    topology: Topology = "tree",
    fanout: int = 2,
) -> list[Hop]:
    """Every hop that delivers one version to every member of ``sites``.

    Members of ``behind`` do not hold the previous version: they get a full copy straight from the origin,
    and are left out of the delta routes (their children in the route are re-planned without them).
    """
    if delta_bytes < 0 or full_bytes < 0:
        raise ValueError(f"bytes must be >= 0, got delta {delta_bytes} and full {full_bytes}")
    hops: list[Hop] = []
    current = {site: [m for m in members if m not in behind] for site, members in sites.items()}
    member_site = {m: site for site, members in sites.items() for m in members}

    def walk(source: str, source_site: str, route: Route) -> None:
        site = member_site[route.member]
        hops.append(Hop(source, route.member, delta_bytes, site != source_site, False))
        for child in route.children:
            walk(route.member, site, child)

    for route in plan_routes({s: m for s, m in current.items() if m}, topology, fanout):
        walk("origin", origin_site, route)
    for member in sorted(behind):
        hops.append(Hop("origin", member, full_bytes, member_site[member] != origin_site, True))
    return hops


def cross_site_bytes(hops: Sequence[Hop]) -> int:
    return sum(h.nbytes for h in hops if h.cross_site)


def bytes_per_hop(hops: Sequence[Hop]) -> dict[str, int]:
    """``{"source->target": bytes}``: the metrics row of one delivery."""
    return {f"{h.source}->{h.target}": h.nbytes for h in hops}
