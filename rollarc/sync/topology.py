"""Fan-out routes: who forwards a weight update to whom inside a site (pure; the relay executes them).

One copy crosses into each site, to the site's first member (its head). From there it spreads:

- ``tree``: member i forwards to members ``i*fanout + 1 .. i*fanout + fanout`` (a heap-ordered
  k-ary tree), so the depth is about log_fanout(members) and no member sends more than ``fanout``.
- ``ring``: each member forwards to the next (a pipeline chain): every member sends one copy.
- ``direct``: the baseline without relaying: the origin sends to every member itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Topology = Literal["direct", "tree", "ring"]


@dataclass(frozen=True, slots=True)
class Route:
    """A member and the sub-routes it forwards to."""

    member: str
    children: tuple[Route, ...] = ()

    def members(self) -> list[str]:
        """Every member reached through this route, this one first."""
        out = [self.member]
        for child in self.children:
            out += child.members()
        return out

    def depth(self) -> int:
        return 1 + max((child.depth() for child in self.children), default=0)


def site_route(members: Sequence[str], topology: Literal["tree", "ring"], fanout: int = 2) -> Route:
    """The route that spreads one copy from ``members[0]`` to all of ``members``."""
    if not members:
        raise ValueError("a site needs at least one member")
    if len(set(members)) != len(members):
        raise ValueError(f"duplicate members in a site: {sorted(members)}")
    if topology == "ring":
        route = Route(members[-1])
        for member in reversed(members[:-1]):
            route = Route(member, (route,))
        return route
    if topology != "tree":
        raise ValueError(f"unknown site topology {topology!r}; allowed: tree, ring")
    if fanout < 1:
        raise ValueError(f"fanout must be >= 1, got {fanout}")

    def build(i: int) -> Route:
        kids = range(i * fanout + 1, min(len(members), i * fanout + fanout + 1))
        return Route(members[i], tuple(build(k) for k in kids))

    return build(0)


def plan_routes(sites: Mapping[str, Sequence[str]], topology: Topology, fanout: int = 2) -> list[Route]:
    """The routes the origin starts: one per site, or one per member for ``direct``."""
    if topology == "direct":
        return [Route(member) for members in sites.values() for member in members]
    return [site_route(list(members), topology, fanout) for members in sites.values() if members]
