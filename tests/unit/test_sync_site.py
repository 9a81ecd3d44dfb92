"""The borrowed site's shards: layouts that partition every tensor, bitwise reassembly, one owner per shard, and a
member that applies shard deltas in any order ending with the publisher's whole weights."""

from __future__ import annotations

import pytest
import torch

from rollarc.sync.config import SyncConfig
from rollarc.sync.shard import ShardSpec, Split, shard_state
from rollarc.sync.site import SiteReceiver, assemble, shard_routes, site_layouts
from rollarc.sync.versions import WHOLE, WeightPublisher, updates_nbytes
from tests.unit.test_sync_versions import versions

SHAPES = {"emb": (10, 4), "proj": (3, 8), "norm": (4,), "tiny": (1,), "scalar": ()}


def test_every_tensor_is_split_along_its_longest_dimension_and_a_scalar_stays_whole():
    layouts = site_layouts(SHAPES, 3)
    assert len(layouts) == 3
    assert layouts[1].split_of("emb") == Split(0, 1, 3)  # 10 rows > 4 columns
    assert layouts[2].split_of("proj") == Split(1, 2, 3)  # 8 columns > 3 rows
    assert layouts[0].split_of("norm") == Split(0, 0, 3)
    assert layouts[0].split_of("scalar") is None
    assert site_layouts(SHAPES, 1) == [WHOLE]
    with pytest.raises(ValueError, match="at least one shard"):
        site_layouts(SHAPES, 0)


def test_the_slices_partition_each_tensor_and_reassemble_bitwise():
    gen = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=gen) for name, shape in SHAPES.items()}
    state["norm"][1] = float("nan")
    state["norm"][2] = -0.0
    layouts = site_layouts({n: tuple(t.shape) for n, t in state.items()}, 3)
    parts = {layout: shard_state(state, layout) for layout in layouts}
    # disjoint and complete: the element counts add up to the tensor's (the scalar is held by every layout)
    for name in ("emb", "proj", "norm", "tiny"):
        assert sum(parts[layout][name].numel() for layout in layouts) == state[name].numel()
    assert [parts[layout]["emb"].shape[0] for layout in layouts] == [4, 3, 3]
    assert [parts[layout]["tiny"].numel() for layout in layouts] == [1, 0, 0]  # shorter than world: empty slices
    whole = assemble(parts)
    assert set(whole) == set(state)
    for name, tensor in state.items():  # bitwise, NaN payloads and -0.0 included
        assert torch.equal(whole[name].view(torch.int32), tensor.view(torch.int32)), name
    with pytest.raises(ValueError, match="not every rank"):
        assemble({layout: parts[layout] for layout in layouts[:2]})


def test_each_shard_leaves_from_its_own_owner_and_reaches_every_member():
    layouts = site_layouts(SHAPES, 3)
    routes = shard_routes(["a", "b", "c"], layouts, fanout=1)
    assert [(layout, route.member) for layout, route in routes] == list(zip(layouts, ["a", "b", "c"], strict=True))
    assert [route.members() for _, route in routes] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [route.depth() for _, route in routes] == [3, 3, 3]  # fanout 1: a chain
    # fewer members than shards (one died): the survivors own every shard between them, one owns two
    routes = shard_routes(["a", "c"], layouts, fanout=2)
    assert [route.member for _, route in routes] == ["a", "c", "a"]
    assert all(sorted(route.members()) == ["a", "c"] for _, route in routes)
    with pytest.raises(ValueError, match="at least one member"):
        shard_routes([], layouts, 2)


def test_a_member_applies_shard_deltas_in_any_order_and_holds_the_publishers_weights_bitwise():
    states = versions(4, 0.05)
    pub = WeightPublisher(SyncConfig(method="delta", history=4, bucket_mb=0.01))
    pub.publish(states[0])
    layouts = site_layouts({n: tuple(t.shape) for n, t in states[0].items()}, 2)
    for layout in layouts:
        pub.register(layout)
    member = SiteReceiver(layouts, states[0], version=0)
    for v in (1, 2, 3):
        pub.publish(states[v])
        order = layouts if v % 2 else list(reversed(layouts))
        member.receivers[order[0]].apply(pub.latest(order[0]))
        assert member.version is None  # one shard ahead of the other: not whole yet
        member.receivers[order[1]].apply(pub.latest(order[1]))
        assert member.version == v
        got = member.weights()
        assert all(torch.equal(got[n], states[v][n]) for n in states[v])
        # the shards' deltas together are about one delta of the whole model (per-tensor headers aside)
        split = sum(updates_nbytes(pub.latest(layout)) for layout in layouts)
        assert split < 1.5 * updates_nbytes(pub.latest(WHOLE))


def test_a_member_that_missed_a_shard_catches_up_with_that_shards_chain():
    states = versions(3, 0.05, seed=1)
    pub = WeightPublisher(SyncConfig(method="delta", history=4, bucket_mb=0.01))
    pub.publish(states[0])
    layouts = site_layouts({n: tuple(t.shape) for n, t in states[0].items()}, 2)
    for layout in layouts:
        pub.register(layout)
    member = SiteReceiver(layouts, states[0], version=0)
    pub.publish(states[1])
    member.receivers[layouts[0]].apply(pub.latest(layouts[0]))  # shard 1 of version 1 never arrived
    pub.publish(states[2])
    member.receivers[layouts[0]].apply(pub.latest(layouts[0]))
    behind = member.receivers[layouts[1]]
    assert not behind.fits(pub.latest(layouts[1]))
    chain = pub.fetch(layouts[1], behind.version)
    assert [(u.base_version, u.version) for u in chain] == [(0, 1), (1, 2)]
    behind.apply(chain)
    got = member.weights()
    assert member.version == 2 and all(torch.equal(got[n], states[2][n]) for n in states[2])


def test_a_replacement_starts_unversioned_and_takes_full_copies_of_every_shard():
    states = versions(2, 0.05, seed=2)
    pub = WeightPublisher(SyncConfig(method="delta"))
    layouts = site_layouts({n: tuple(t.shape) for n, t in states[0].items()}, 2)
    pub.publish(states[0])
    pub.publish(states[1])
    member = SiteReceiver(layouts, states[0], version=None)
    assert member.version is None
    for layout in layouts:
        (full,) = pub.fetch(layout, None)
        assert full.full and full.layout == layout
        member.receivers[layout].apply((full,))
    got = member.weights()
    assert member.version == 1 and all(torch.equal(got[n], states[1][n]) for n in states[1])
    assert isinstance(layouts[0], ShardSpec) and not layouts[0].whole
