"""``rollarc.runtime.site_relay``: one member's relay of a shard, its apply with catch-up, and the step's bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from rollarc.runtime.site_relay import apply_shard, relay_shard, site_bytes
from rollarc.sync.config import SyncConfig
from rollarc.sync.topology import Route
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher, WeightReceiver, updates_nbytes


class Gone(Exception):
    """A member that died (``RayActorError`` in training)."""


def run_route(route: Route, events: list[str], dead: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Relay along ``route`` with in-process members whose apply reports 10 bytes and logs what happens when."""

    async def member(node: Route, source: str, cross: bool) -> list[dict[str, Any]]:
        if node.member in dead:
            raise Gone(node.member)

        def forward(child: Route) -> asyncio.Future[list[dict[str, Any]]]:
            events.append(f"send {node.member}->{child.member}")
            return asyncio.ensure_future(member(child, node.member, False))

        async def apply() -> dict[str, Any]:
            events.append(f"apply {node.member}")
            return {"bytes": 10, "catch_up_bytes": 0, "full_copy": False}

        return await relay_shard(node.member, WHOLE, node, source, cross, forward, apply, lost=(Gone,))

    return asyncio.run(member(route, "origin", True))


def test_a_member_sends_to_its_children_before_applying_and_returns_every_hop_below_it():
    events: list[str] = []
    route = Route("a", (Route("b", (Route("d"),)), Route("c")))
    hops = run_route(route, events)
    assert events[:3] == ["send a->b", "send a->c", "apply a"]
    assert [(h["source"], h["target"], h["cross_site"]) for h in hops] == [
        ("origin", "a", True),
        ("a", "b", False),
        ("b", "d", False),
        ("a", "c", False),
    ]
    assert all(h["bytes"] == 10 and h["shard"] == WHOLE for h in hops)


def test_a_dead_child_is_left_out_with_its_subtree_and_other_errors_propagate():
    hops = run_route(Route("a", (Route("b", (Route("d"),)), Route("c"))), [], dead=frozenset({"b"}))
    assert [h["target"] for h in hops] == ["a", "c"]

    async def broken(child: Route) -> list[dict[str, Any]]:
        raise KeyError(child.member)

    async def apply() -> dict[str, Any]:
        return {"bytes": 1, "catch_up_bytes": 0, "full_copy": False}

    async def go() -> list[dict[str, Any]]:
        return await relay_shard(
            "a", WHOLE, Route("a", (Route("b"),)), "origin", True, lambda c: asyncio.ensure_future(broken(c)), apply
        )

    with pytest.raises(KeyError):
        asyncio.run(go())


def versions(count: int) -> tuple[WeightPublisher, list[dict[str, torch.Tensor]]]:
    publisher = WeightPublisher(SyncConfig(method="delta", dtype="bfloat16"))
    states = []
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 32, generator=gen)
    for i in range(count):
        w = w.clone()
        w[i, :4] += 1.0  # 4 elements change per version
        publisher.publish({"w": w})
        states.append({"w": w.to(torch.bfloat16)})
    return publisher, states


def test_apply_shard_moves_a_fitting_receiver_and_counts_only_the_pushed_bytes():
    publisher, states = versions(2)
    receiver = WeightReceiver(WHOLE, {"w": states[0]["w"].clone()}, 0)
    pushed = publisher.latest(WHOLE)

    async def fetch(have: int | None) -> tuple[VersionedUpdate, ...]:
        raise AssertionError("a fitting delta needs no catch-up")

    hop, moved = asyncio.run(apply_shard(receiver, 1, pushed, fetch))
    assert moved and receiver.version == 1 and torch.equal(receiver.state["w"], states[1]["w"])
    assert hop == {"bytes": updates_nbytes(pushed), "catch_up_bytes": 0, "full_copy": False}
    again, moved = asyncio.run(apply_shard(receiver, 1, pushed, fetch))  # held already: nothing applied
    assert not moved and again == hop


def test_apply_shard_catches_a_lagging_receiver_up_and_counts_the_chain():
    publisher, states = versions(3)
    receiver = WeightReceiver(WHOLE, {"w": states[0]["w"].clone()}, 0)
    asked: list[int | None] = []

    async def fetch(have: int | None) -> tuple[VersionedUpdate, ...]:
        asked.append(have)
        return publisher.fetch(WHOLE, have)

    pushed = publisher.latest(WHOLE)  # 1 -> 2: does not fit a receiver at 0
    hop, moved = asyncio.run(apply_shard(receiver, 2, pushed, fetch))
    assert moved and asked == [0] and receiver.version == 2
    assert torch.equal(receiver.state["w"].view(torch.int16), states[2]["w"].view(torch.int16))
    assert hop["bytes"] == updates_nbytes(pushed)
    assert hop["catch_up_bytes"] == updates_nbytes(publisher.fetch(WHOLE, 0)) and not hop["full_copy"]


def test_site_bytes_counts_pushes_across_the_boundary_forwards_inside_it_and_every_catch_up():
    hops = [
        {"source": "origin", "target": "a", "cross_site": True, "bytes": 100, "catch_up_bytes": 0, "full_copy": False},
        {"source": "a", "target": "b", "cross_site": False, "bytes": 100, "catch_up_bytes": 7, "full_copy": False},
        {"source": "origin", "target": "b", "cross_site": True, "bytes": 60, "catch_up_bytes": 0, "full_copy": False},
        {"source": "b", "target": "a", "cross_site": False, "bytes": 60, "catch_up_bytes": 900, "full_copy": True},
        {"source": "origin", "target": "ded", "cross_site": False, "bytes": 5, "catch_up_bytes": 0, "full_copy": False},
    ]
    assert site_bytes(hops) == {"cross_site_bytes": 100 + 60 + 7 + 900, "in_site_bytes": 160, "sync_full_copies": 1}
