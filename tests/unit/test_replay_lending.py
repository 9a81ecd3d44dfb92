"""Lending, withdrawal and migration replayed through the scheduling core, with the Router's routing rule
(``make_dispatcher``: the borrowed pool held to its reported headroom) and ``configs/harvest.yaml``'s hysteresis."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollarc.config import load_train_config
from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.lending import LendingPolicy
from rollarc.policy.replay import Headroom, InProcessDriver, TurnEnds, TurnStarts, replay
from rollarc.policy.scheduler import GroupScheduler
from rollarc.runtime.scheduling import dedicated_first, make_dispatcher, task_pools

REPO = Path(__file__).resolve().parents[2]
BORROWED = "borrowed-0"


def driver(dispatcher: Dispatcher) -> InProcessDriver:
    harvest = load_train_config(REPO / "configs/harvest.yaml", []).harvest
    assert harvest is not None and (harvest.lend_after_s, harvest.withdraw_after_s) == (0.5, 0.5)
    dispatcher.add_replica("r0", "compute", 2)
    lending = {BORROWED: LendingPolicy(harvest.lend_after_s, harvest.withdraw_after_s, harvest.min_capacity)}
    return InProcessDriver(GroupScheduler(1, 0, {"t": 1.0}, total_steps=1), dispatcher, lending)


def test_lend_resize_withdraw_migrate_and_lend_again() -> None:
    d = driver(make_dispatcher({"t": None}))
    events = [
        TurnStarts("a", "t"),
        TurnStarts("b", "t"),
        Headroom(BORROWED, 2, 0.0),  # headroom, but not for lend_after_s yet
        Headroom(BORROWED, 2, 0.5),  # lent, capacity 2
        TurnStarts("c", "t"),
        TurnStarts("d", "t"),
        TurnStarts("e", "t"),  # the borrowed replica is at its capacity: the dedicated one takes it
        TurnEnds("c"),
        Headroom(BORROWED, 0, 0.7),  # serving load rose: capacity 0, still lent
        TurnStarts("f", "t"),
        TurnStarts("c", "t"),  # its prefix is on the borrowed replica, which has no room: not sticky there
        Headroom(BORROWED, 0, 1.2),  # dry for withdraw_after_s: withdrawn, d's turn migrates
        Headroom(BORROWED, 3, 1.3),
        Headroom(BORROWED, 3, 1.8),  # lent again after lend_after_s, capacity 3
        TurnStarts("g", "t"),
    ]
    decisions = replay(d, events)
    assert decisions.routes == [
        ("a", "r0"),
        ("b", "r0"),
        ("c", BORROWED),
        ("d", BORROWED),
        ("e", "r0"),
        ("f", "r0"),
        ("c", "r0"),
        ("g", BORROWED),
    ]
    assert decisions.lending == [(BORROWED, "lend"), (BORROWED, "withdraw"), (BORROWED, "lend")]
    assert decisions.migrations == [("d", "r0")]
    assert d.dispatcher.replicas["r0"].outstanding == 6  # a b e f c d
    assert d.dispatcher.replicas[BORROWED].capacity == 3 and d.dispatcher.replicas[BORROWED].outstanding == 1


def test_dedicated_first_keeps_borrowed_capacity_for_the_overflow() -> None:
    d = driver(make_dispatcher({"t": None}, dedicated_first=True))
    events = [Headroom(BORROWED, 2, 0.0), Headroom(BORROWED, 2, 0.5)] + [TurnStarts(x, "t") for x in "abcde"]
    decisions = replay(d, events)
    assert decisions.routes == [("a", "r0"), ("b", "r0"), ("c", BORROWED), ("d", BORROWED), ("e", "r0")]


def test_a_driver_without_lending_refuses_headroom_events() -> None:
    class RoutesOnly:
        def __init__(self, inner: InProcessDriver) -> None:
            self.inner = inner

        def admissions(self):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(TypeError, match="lends no replica"):
        replay(RoutesOnly(driver(make_dispatcher({}))), [Headroom(BORROWED, 1, 0.0)])  # type: ignore[arg-type]


def test_harvest_dedicated_first_reaches_the_routers_dispatcher() -> None:
    """What the Workers pass to the Router, which builds its dispatcher from it (``make_dispatcher``)."""
    on = load_train_config(REPO / "configs/harvest.yaml", ["harvest.dedicated_first=true"])
    off = load_train_config(REPO / "configs/harvest.yaml", [])
    assert make_dispatcher(task_pools(on), dedicated_first=dedicated_first(on)).dedicated_first
    assert not make_dispatcher(task_pools(off), dedicated_first=dedicated_first(off)).dedicated_first
