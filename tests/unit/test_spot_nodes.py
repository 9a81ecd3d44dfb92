"""Spot nodes of a cluster the run joined, and where explorer slots go (issue 44, item 2): hand-computed."""

from rollarc.spotlight.spot_nodes import NodeView, place, queue_node, spot_capacity

SPOT = "pool_spot"
NODES = [
    NodeView("h", alive=True, head=True, resources={"CPU": 2.0, "pool_compute": 2.0}),
    NodeView("w", alive=True, head=False, resources={"CPU": 1.0}),
    NodeView("s1", alive=True, head=False, resources={SPOT: 1.0}),
    NodeView("s2", alive=True, head=False, resources={SPOT: 2.0, "CPU": 1.0}),
    NodeView("s3", alive=False, head=False, resources={SPOT: 1.0}),  # preempted: dead
    NodeView("s4", alive=True, head=False, resources={SPOT: 1.0}),
    NodeView("half", alive=True, head=False, resources={SPOT: 0.5}),  # no whole unit: no slot
]


def test_spot_capacity_counts_whole_units_of_alive_not_draining_spot_nodes():
    assert spot_capacity(NODES, SPOT, draining={"s4"}) == {"s1": 1, "s2": 2}
    assert spot_capacity(NODES, SPOT, draining=set()) == {"s1": 1, "s2": 2, "s4": 1}
    assert spot_capacity(NODES, "spot", draining=set()) == {}  # a resource no node carries


def test_slots_spread_over_the_nodes_with_most_spare_units():
    # s2 has 2 spare, s1 and s4 one each: slot 0 -> s2, then ties (1 each) by id: s1, s2, s4
    assert place([0, 1, 2, 3], {"s1": 1, "s2": 2, "s4": 1}, {}) == {0: "s2", 1: "s1", 2: "s2", 3: "s4"}


def test_slots_beyond_the_spare_units_stay_free():
    # s2 already runs one worker, s1 one: only s2's second unit is spare
    assert place([3, 5], {"s1": 1, "s2": 2}, {"s1": 1, "s2": 1}) == {3: "s2"}
    assert place([0], {}, {}) == {}
    assert place([], {"s1": 1}, {}) == {}


def test_queue_goes_on_the_head_unless_it_is_spot():
    assert queue_node(NODES, SPOT) == "h"
    spot_head = [NodeView("h", True, True, {SPOT: 1.0}), NodeView("b", True, False, {}), NodeView("a", True, False, {})]
    assert queue_node(spot_head, SPOT) == "a"
    assert queue_node([NodeView("h", True, True, {SPOT: 1.0}), NodeView("x", False, False, {})], SPOT) is None
