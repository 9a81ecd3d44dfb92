"""The Dispatcher's borrowed-capacity rules, as the Router runs them (``make_dispatcher``: the borrowed pool held to
its reported headroom): capacity from headroom, dedicated first, and a withdrawn or lost replica's turns routed
again. Hand-worked routes: least loaded, ties by name ("bor" before "ded")."""

from __future__ import annotations

import pytest

from rollarc.policy.dispatcher import BORROWED_POOL, Dispatcher
from rollarc.policy.routing import NoReplicaError
from rollarc.runtime.scheduling import make_dispatcher


def router_dispatcher(dedicated: int, borrowed: int, dedicated_first: bool = True) -> Dispatcher:
    d = make_dispatcher({}, dedicated_first=dedicated_first)
    d.add_replica("ded", "dedicated", dedicated)
    d.add_replica("bor", BORROWED_POOL, borrowed)
    return d


def test_affinity_then_dedicated_then_borrowed() -> None:
    d = router_dispatcher(2, 2)
    routes = {f"t{i}": d.start_turn(f"t{i}", None) for i in range(5)}
    # ded while it has a free place; then the least loaded with room (bor); bor full (hard): ded takes the overflow
    assert {t: r.replica for t, r in routes.items()} == {
        "t0": "ded",
        "t1": "ded",
        "t2": "bor",
        "t3": "bor",
        "t4": "ded",
    }
    d.finish_turn(routes["t2"])
    d.finish_turn(routes["t0"])
    again = d.start_turn("t2", None)  # its prefix is on the borrowed replica, which has a free place again
    assert (again.replica, again.sticky) == ("bor", True)
    again = d.start_turn("t0", None)  # its prefix is on ded (2 of 2 taken, but a dedicated capacity is no limit)
    assert (again.replica, again.sticky) == ("ded", True)
    assert (d.replicas["ded"].outstanding, d.replicas["bor"].outstanding) == (3, 2)


def test_least_loaded_over_both_without_dedicated_first() -> None:
    d = router_dispatcher(2, 2, dedicated_first=False)
    assert [d.start_turn(f"t{i}", None).replica for i in range(5)] == ["bor", "ded", "bor", "ded", "ded"]


def test_headroom_sets_the_borrowed_capacity_and_nothing_overflows_it() -> None:
    d = router_dispatcher(1, 0)  # the borrowed replica reports no headroom yet
    assert [d.start_turn(f"t{i}", None).replica for i in range(3)] == ["ded", "ded", "ded"]
    d.set_capacity("bor", 1)  # headroom reported
    assert d.start_turn("t3", None).replica == "bor"
    d.set_capacity("bor", 0)  # serving load rose: its running turn goes on, no new one goes there
    assert d.start_turn("t4", None).replica == "ded" and d.replicas["bor"].outstanding == 1
    d.set_capacity("nobody", 3)  # a report from a replica no longer registered: ignored
    assert set(d.replicas) == {"ded", "bor"}


def test_only_full_borrowed_replicas_left_raises() -> None:
    d = router_dispatcher(1, 1)
    d.stop_accepting("ded")
    d.start_turn("a", None)
    with pytest.raises(NoReplicaError, match="at its capacity"):
        d.start_turn("b", None)  # the Router waits for a replacement, then fails the turn
    d.mark_dead("bor")
    with pytest.raises(NoReplicaError, match="no rollout replica is alive"):
        d.start_turn("c", None)


def test_a_withdrawn_replicas_turns_are_routed_again_and_a_relent_replica_takes_work() -> None:
    d = router_dispatcher(1, 1)
    first = {t: d.start_turn(t, None) for t in ("t0", "t1")}
    assert {t: r.replica for t, r in first.items()} == {"t0": "ded", "t1": "bor"}
    d.stop_accepting("bor")  # Router.remove_replica: no new turn, its sticky trajectories forgotten
    assert d.sticky_replica("t1") is None
    d.finish_turn(first["t1"])  # aborted: the agent loop sends the turn again
    d.remove("bor")
    again = d.start_turn("t1", None)
    assert (again.replica, again.sticky) == ("ded", False) and d.replicas["ded"].outstanding == 2
    d.add_replica("bor", BORROWED_POOL, 1)  # lent again
    assert d.start_turn("t2", None).replica == "bor"


def test_a_lost_replica_loses_its_trajectories_and_its_load_stays_off_the_others() -> None:
    d = router_dispatcher(1, 2)
    routes = [d.start_turn(f"t{i}", None) for i in range(3)]
    assert [r.replica for r in routes] == ["ded", "bor", "bor"]
    assert d.mark_dead("bor") and not d.mark_dead("bor")  # counted once
    for route in routes[1:]:
        d.finish_turn(route)  # the Router's failed calls end their turns, then fail them over
    assert [d.start_turn(f"t{i}", None).replica for i in (1, 2)] == ["ded", "ded"]
    assert d.replicas["ded"].outstanding == 3 and d.replicas["bor"].outstanding == 0


def test_a_full_dedicated_replica_still_takes_the_turn() -> None:
    d = Dispatcher({})
    d.add_replica("ded", "dedicated", 1)
    assert [d.start_turn(t, t).replica for t in ("a", "b")] == ["ded", "ded"]
    assert d.replicas["ded"].outstanding == 2


def test_the_routers_dispatcher_holds_a_borrowed_replica_to_its_headroom() -> None:
    d = make_dispatcher({"t": None})
    d.add_replica("r0", "compute", 1)
    d.add_replica("bor", BORROWED_POOL, 1)
    first = d.start_turn("a", "t")
    assert first.replica == "bor"  # least loaded, ties by name
    assert d.start_turn("b", "t").replica == "r0"
    assert d.start_turn("c", "t").replica == "r0"  # bor is full (hard); the dedicated replica takes the overflow
    d.set_capacity("bor", 3)  # headroom grew
    assert d.start_turn("d", "t").replica == "bor"
    d.set_capacity("bor", 0)  # serving load rose: nothing new goes there
    assert [d.start_turn(k, "t").replica for k in "efg"] == ["r0", "r0", "r0"]
    d.remove("bor")  # withdrawn: back on the indexed path
    assert d.start_turn("h", "t").replica == "r0" and d._hard_members == 0
