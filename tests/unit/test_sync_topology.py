"""Fan-out routes inside a site: tree shape, ring chain, direct baseline."""

from __future__ import annotations

import pytest

from rollarc.sync.topology import Route, plan_routes, site_route


def edges(route: Route) -> list[tuple[str, str]]:
    out = [(route.member, child.member) for child in route.children]
    for child in route.children:
        out += edges(child)
    return out


def test_binary_tree_is_heap_ordered():
    route = site_route([f"m{i}" for i in range(6)], "tree", fanout=2)
    assert sorted(edges(route)) == [("m0", "m1"), ("m0", "m2"), ("m1", "m3"), ("m1", "m4"), ("m2", "m5")]
    assert route.depth() == 3 and sorted(route.members()) == [f"m{i}" for i in range(6)]


def test_wide_tree_and_single_member():
    route = site_route(["a", "b", "c", "d"], "tree", fanout=8)
    assert [c.member for c in route.children] == ["b", "c", "d"] and route.depth() == 2
    assert site_route(["solo"], "tree") == Route("solo")


def test_ring_is_a_chain_in_order():
    route = site_route(["a", "b", "c", "d"], "ring")
    assert edges(route) == [("a", "b"), ("b", "c"), ("c", "d")] and route.depth() == 4


def test_plan_has_one_route_per_site_or_per_member_for_direct():
    sites = {"east": ["e0", "e1", "e2"], "west": ["w0", "w1"]}
    routes = plan_routes(sites, "tree", fanout=2)
    assert [r.member for r in routes] == ["e0", "w0"]
    assert sum(len(r.members()) for r in routes) == 5
    direct = plan_routes(sites, "direct")
    assert [r.member for r in direct] == ["e0", "e1", "e2", "w0", "w1"] and all(not r.children for r in direct)


def test_bad_sites_are_rejected():
    with pytest.raises(ValueError, match="at least one member"):
        site_route([], "tree")
    with pytest.raises(ValueError, match="duplicate"):
        site_route(["a", "a"], "ring")
    with pytest.raises(ValueError, match="fanout"):
        site_route(["a", "b"], "tree", fanout=0)
