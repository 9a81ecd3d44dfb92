"""Task mixing by weight, and the routing policy (sticky prefix, preferred pool, bounded stealing)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.routing import NoReplicaError, ReplicaState, Route, RoutingPolicy
from rollarc.policy.task_mix import TaskMix


def test_task_mix_follows_weights_exactly_and_deterministically():
    mix = TaskMix({"a": 3.0, "b": 1.0})
    first = [mix.next() for _ in range(8)]
    assert Counter(first) == {"a": 6, "b": 2}
    again = TaskMix({"a": 3.0, "b": 1.0})
    assert [again.next() for _ in range(8)] == first
    skipped = TaskMix({"a": 3.0, "b": 1.0})
    skipped.skip(5)
    assert [skipped.next() for _ in range(3)] == first[5:]
    with pytest.raises(ValueError):
        TaskMix({"a": 0.0})


def replicas(*specs: tuple[str, str, int, int]) -> dict[str, ReplicaState]:
    return {name: ReplicaState(name=name, pool=pool, capacity=cap, outstanding=out) for name, pool, cap, out in specs}


def test_preferred_pool_and_least_loaded():
    policy = RoutingPolicy()
    reps = replicas(("c0", "compute", 4, 0), ("b0", "bandwidth", 4, 2), ("b1", "bandwidth", 4, 1))
    assert policy.choose(reps, None, "bandwidth").replica == "b1"
    assert policy.choose(reps, None, "compute").replica == "c0"
    assert policy.choose(reps, None, None).replica == "c0"


def test_sticky_prefix_wins_over_load():
    policy = RoutingPolicy()
    reps = replicas(("b0", "bandwidth", 4, 0), ("b1", "bandwidth", 4, 0))
    first = policy.choose(reps, "traj-1", "bandwidth")
    assert not first.sticky
    reps[first.replica].outstanding = 3
    again = policy.choose(reps, "traj-1", "bandwidth")
    assert again.replica == first.replica and again.sticky
    reps[first.replica].alive = False
    moved = policy.choose(reps, "traj-1", "bandwidth")
    assert moved.replica != first.replica and not moved.sticky


def test_work_stealing_only_when_full_and_bounded():
    policy = RoutingPolicy(steal_fraction=0.5)
    reps = replicas(("b0", "bandwidth", 4, 3), ("c0", "compute", 4, 0))
    assert policy.choose(reps, None, "bandwidth").replica == "b0"  # not full yet: no stealing
    reps["b0"].outstanding = 4
    route = policy.choose(reps, None, "bandwidth")
    assert route.replica == "c0" and route.stolen
    reps["c0"].foreign = 2  # steal bound reached (0.5 * capacity)
    assert policy.choose(reps, None, "bandwidth").replica == "b0"
    reps["c0"].foreign = 0
    reps["c0"].outstanding = 2  # not idle enough (half full)
    assert policy.choose(reps, None, "bandwidth").replica == "b0"


def test_no_usable_replica_is_a_clear_error():
    policy = RoutingPolicy()
    reps = replicas(("c0", "compute", 4, 0))
    reps["c0"].accepting = False
    with pytest.raises(NoReplicaError, match="no rollout replica"):
        policy.choose(reps, None, None)


def test_forget_drops_sticky_entries_of_a_replica():
    policy = RoutingPolicy()
    reps = replicas(("c0", "compute", 4, 0), ("c1", "compute", 4, 1))
    policy.choose(reps, "t", None)
    policy.forget("c0")
    assert "t" not in policy.sticky


def test_dispatcher_counts_load_so_least_loaded_and_sticky_follow_the_turns():
    dispatch = Dispatcher({"read": "p1"})
    dispatch.add_replica("a", "p1", 4)
    dispatch.add_replica("b", "p1", 4)
    first = dispatch.start_turn("t1", "read")
    second = dispatch.start_turn("t2", "read")
    assert (first.replica, second.replica) == ("a", "b")  # a is busy with t1, so t2 goes to b
    dispatch.finish_turn(first)
    dispatch.start_turn("t3", "read")  # a is free again: least loaded, ties by name
    again = dispatch.start_turn("t1", "read")  # t1's prefix is on a, even though a is now the busier
    assert again.replica == "a" and again.sticky
    assert (dispatch.replicas["a"].outstanding, dispatch.replicas["b"].outstanding) == (2, 1)
    dispatch.release("t1")
    assert dispatch.sticky_replica("t1") is None


def test_dispatcher_stealing_stops_at_the_bound():
    # Pool p1 has one replica of capacity 2; p2's replica (capacity 8, so idle enough below 4 turns) may
    # hold fewer than 0.25 x 8 = 2 foreign turns. Once p1 is full, two turns are stolen, then p1 queues.
    dispatch = Dispatcher({"read": "p1"}, steal_fraction=0.25)
    dispatch.add_replica("own", "p1", 2)
    dispatch.add_replica("other", "p2", 8)
    routes = [dispatch.start_turn(f"t{i}", "read") for i in range(6)]
    assert [r.replica for r in routes] == ["own", "own", "other", "other", "own", "own"]
    assert [r.stolen for r in routes].count(True) == 2 and dispatch.replicas["other"].foreign == 2
    dispatch.finish_turn(routes[2])  # one stolen turn ends: the bound has room again
    assert dispatch.replicas["other"].foreign == 1
    assert dispatch.start_turn("t9", "read").replica == "other"


def test_dispatcher_dead_replica_loses_its_sticky_trajectories():
    dispatch = Dispatcher({})
    dispatch.add_replica("a", "p", 4)
    dispatch.add_replica("b", "p", 4)
    assert dispatch.start_turn("t", None).replica == "a"
    assert dispatch.mark_dead("a") and not dispatch.mark_dead("a")
    moved = dispatch.start_turn("t", None)
    assert moved.replica == "b" and not moved.sticky


@settings(max_examples=100, deadline=None)
@given(
    script=st.lists(
        st.tuples(st.sampled_from(["start", "finish", "dead", "drain", "add", "remove"]), st.integers(0, 999)),
        max_size=200,
    )
)
def test_the_dispatchers_load_index_chooses_exactly_what_a_scan_of_the_replicas_chooses(script):
    """The heap of replicas by load (kept for the simulator's speed) changes no routing decision."""
    pools = {"math": "a", "swe": "b", "free": None}
    dispatcher = Dispatcher(pools)
    for i in range(6):
        dispatcher.add_replica(f"r{i}", "ab"[i % 2], 3)
    running: list[Route] = []
    added = 6
    for action, pick in script:
        names = sorted(dispatcher.replicas)
        if action == "start":
            task = sorted(pools)[pick % 3]
            if any(r.usable for r in dispatcher.replicas.values()):
                scan = RoutingPolicy().choose(dispatcher.replicas, None, pools[task])
                route = dispatcher.start_turn(None, task)
                assert route == scan
                running.append(route)
        elif action == "finish" and running:
            dispatcher.finish_turn(running.pop(pick % len(running)))
        elif action in ("dead", "drain", "remove") and names:
            name = names[pick % len(names)]
            {"dead": dispatcher.mark_dead, "drain": dispatcher.stop_accepting, "remove": dispatcher.remove}[action](
                name
            )
        elif action == "add":
            dispatcher.add_replica(f"r{added}", "ab"[pick % 2], 1 + pick % 4)
            added += 1
