"""A Ray-restarted router learns the borrowed replicas again: ``lent_registrations`` is what HarvestPool passes."""

import asyncio
from typing import Any

from rollarc.policy.dispatcher import BORROWED_POOL
from rollarc.policy.lending import LendingPolicy
from rollarc.runtime.harvest_pool import lent_registrations
from rollarc.runtime.router import Router


def _policy(lend: bool) -> LendingPolicy:
    policy = LendingPolicy(lend_after_s=1.0, withdraw_after_s=1.0, min_capacity=2)
    policy.observe(0.0, 4)
    assert policy.observe(1.5, 4 if lend else 0) == ("lend" if lend else None)
    return policy


def test_only_lent_replicas_come_back_at_their_last_reported_headroom() -> None:
    lending = {"borrowed-0": _policy(True), "borrowed-1": _policy(False), "borrowed-2": _policy(True)}
    replicas = {"borrowed-0": "h0", "borrowed-1": "h1", "borrowed-2": "h2"}
    reports = {"borrowed-0": {"capacity": 3}, "borrowed-1": {"capacity": 0}, "borrowed-2": {"capacity": 7}}
    assert lent_registrations(lending, replicas, reports) == [
        ("borrowed-0", "h0", BORROWED_POOL, 3),
        ("borrowed-2", "h2", BORROWED_POOL, 7),
    ]


def test_a_withdrawn_replica_is_not_registered_again() -> None:
    policy = _policy(True)
    policy.observe(2.0, 0)
    assert policy.observe(3.5, 0) == "withdraw"
    assert lent_registrations({"borrowed-0": policy}, {"borrowed-0": "h0"}, {"borrowed-0": {"capacity": 0}}) == []


def test_a_replica_that_died_is_not_registered_again() -> None:
    # HarvestPool._on_death drops the replica's handle and policy; a stale policy without a handle is skipped
    assert lent_registrations({"borrowed-0": _policy(True)}, {}, {"borrowed-0": {"capacity": 5}}) == []


def test_a_restarted_router_routes_to_the_borrowed_pool_at_the_reported_capacity() -> None:
    async def go() -> dict[str, Any]:
        router = Router.__ray_actor_class__({"t": None})
        router.restarted = True  # what Ray's reconstruction sets: the door is shut until reregister
        lending = {"borrowed-0": _policy(True)}
        borrowed = lent_registrations(lending, {"borrowed-0": "h0"}, {"borrowed-0": {"capacity": 6}})
        router.reregister([("rollout-0", "d0", "compute", 64), *borrowed])
        return {n: (s.pool, s.capacity) for n, s in router.dispatch.replicas.items()} | {
            "needs": router.needs_replicas(),
            "handle": router.handles["borrowed-0"],
        }

    assert asyncio.run(go()) == {
        "rollout-0": ("compute", 64),
        "borrowed-0": (BORROWED_POOL, 6),
        "needs": False,
        "handle": "h0",
    }
