"""The Dispatcher's borrowed-capacity rules (what rose/harvest.py's HarvestScheduler used to decide on its own):
capacity from reported headroom, a wait queue when nothing has room, dedicated first, and migration of a
withdrawn or lost replica's turns to the head of the queue."""

from __future__ import annotations

import pytest

from rollarc.policy.dispatcher import BORROWED_POOL, Dispatcher
from rollarc.policy.routing import NoReplicaError
from rollarc.runtime.scheduling import make_dispatcher


def harvest_dispatcher(dedicated: int, borrowed: int, dedicated_first: bool = True) -> Dispatcher:
    d = Dispatcher({}, enforce_capacity=True, dedicated_first=dedicated_first)
    d.add_replica("ded", "dedicated", dedicated)
    d.add_replica("bor", BORROWED_POOL, borrowed)
    return d


def placed(d: Dispatcher) -> dict[str, str]:
    return {turn: route.replica for turn, route in d.dispatch()}


def test_affinity_then_dedicated_then_borrowed() -> None:
    d = harvest_dispatcher(2, 2)
    for i in range(4):
        d.submit(f"t{i}.0", f"t{i}")
    assert placed(d) == {"t0.0": "ded", "t1.0": "ded", "t2.0": "bor", "t3.0": "bor"}
    assert d.counters["dispatched"] == 4 and d.counters["dispatched_borrowed"] == 2
    d.complete("t2.0")
    d.complete("t0.0")
    d.submit("t2.1", "t2")  # its prefix is on the borrowed replica, which has a free place
    d.submit("t0.1", "t0")
    routes = {turn: (route.replica, route.sticky) for turn, route in d.dispatch()}
    assert routes == {"t2.1": ("bor", True), "t0.1": ("ded", True)}
    assert d.counters["affinity_hits"] == 2 and d.counters["affinity_misses"] == 0


def test_least_loaded_over_both_without_dedicated_first() -> None:
    d = harvest_dispatcher(2, 2, dedicated_first=False)
    for i in range(4):
        d.submit(f"t{i}.0", f"t{i}")
    assert placed(d) == {"t0.0": "bor", "t1.0": "ded", "t2.0": "bor", "t3.0": "ded"}  # ties by name


def test_full_replicas_queue_and_headroom_sets_capacity() -> None:
    d = harvest_dispatcher(1, 0)  # the borrowed replica reports no headroom yet
    for i in range(3):
        d.submit(f"t{i}.0", f"t{i}")
    assert placed(d) == {"t0.0": "ded"}
    assert [q.turn for q in d.waiting] == ["t1.0", "t2.0"]
    assert d.dispatch() == []  # still no room: nothing placed, the order kept
    d.set_capacity("bor", 1)  # headroom reported
    assert placed(d) == {"t1.0": "bor"}
    d.set_capacity("bor", 0)  # serving load rose: its running turn goes on, no new one goes there
    d.complete("t1.0")
    assert d.dispatch() == [] and [q.turn for q in d.waiting] == ["t2.0"]
    with pytest.raises(NoReplicaError):
        d.start_turn("t9", None)  # the unqueued path with everything full
    d.set_capacity("nobody", 3)  # a report from a replica no longer registered: ignored
    assert set(d.replicas) == {"ded", "bor"}


def test_withdraw_migrates_to_the_queue_head_and_a_relent_replica_takes_work() -> None:
    d = harvest_dispatcher(1, 1)
    for i in range(3):
        d.submit(f"t{i}.0", f"t{i}")
    assert placed(d) == {"t0.0": "ded", "t1.0": "bor"}
    d.stop_accepting("bor")  # LendingPolicy said withdraw
    assert d.migrate("bor", ["t1.0"]) == ["t1.0"]  # the replica handed it back
    d.remove("bor")
    assert [q.turn for q in d.waiting] == ["t1.0", "t2.0"] and d.counters["migrations"] == 1
    assert d.sticky_replica("t1") is None  # its prefix is gone with the replica
    assert d.dispatch() == []
    d.complete("t0.0")
    assert placed(d) == {"t1.0": "ded"}
    d.add_replica("bor", BORROWED_POOL, 1)  # lent again
    assert placed(d) == {"t2.0": "bor"}


def test_a_lost_replica_requeues_all_its_turns_in_order() -> None:
    d = harvest_dispatcher(1, 2)
    for i in range(3):
        d.submit(f"t{i}.0", f"t{i}")
    d.dispatch()
    assert d.mark_dead("bor")
    assert d.migrate("bor") == ["t1.0", "t2.0"]
    assert [q.turn for q in d.waiting] == ["t1.0", "t2.0"]
    d.complete("t0.0")
    assert placed(d) == {"t1.0": "ded"}
    assert d.replicas["ded"].outstanding == 1 and d.replicas["bor"].outstanding == 0


def test_without_enforcement_a_full_replica_still_takes_the_turn() -> None:
    d = Dispatcher({})
    d.add_replica("ded", "dedicated", 1)
    d.submit("a", "ta")
    d.submit("b", "tb")
    assert placed(d) == {"a": "ded", "b": "ded"}
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
