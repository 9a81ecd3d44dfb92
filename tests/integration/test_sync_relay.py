"""Relay fan-out on a local Ray cluster: identical weights everywhere, one copy per site, catch-up by bytes."""

from __future__ import annotations

import pytest
import ray
import torch

from rollarc.models import new_policy
from rollarc.ray_local_start import init_local_ray
from rollarc.sync.config import RelayConfig
from rollarc.sync.relay import Member, WeightRelay
from rollarc.sync.shard import ShardSpec, llama_tensor_parallel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    init_local_ray(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield
    ray.shutdown()


def bf16_versions(count: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive bf16 versions of the nano policy after real AdamW steps at lr 1e-6 on a fixed token batch."""
    model, _ = new_policy("nano")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batch = torch.randint(6, 100, (2, 32), generator=torch.Generator().manual_seed(0))
    out = []
    for _ in range(count):
        out.append({n: p.detach().to(torch.bfloat16).clone() for n, p in model.named_parameters()})
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return out


def test_tree_and_ring_deliver_identical_weights_with_one_copy_per_site():
    members = [Member(f"{site}{i}", site) for site in ("east", "west") for i in range(3)]
    relay = WeightRelay(members, RelayConfig(method="delta", topology="tree", fanout=2))
    try:
        states = bf16_versions(4)
        first = relay.publish(states[0])
        assert set(first.versions.values()) == {0} and all(relay.verify().values())
        tree = relay.publish(states[1])
        assert set(tree.versions.values()) == {1} and all(relay.verify().values())
        cross = [t for t in tree.transfers if t.cross_site]
        assert [t.dst_site for t in cross] == ["east", "west"]
        assert len(tree.transfers) == 6 and {t.nbytes for t in tree.transfers} == {cross[0].nbytes}
        assert cross[0].nbytes < first.cross_site_bytes / 2 / 4  # a delta, far smaller than the full copy
        ring = relay.publish(states[2], topology="ring")
        assert set(ring.versions.values()) == {2} and all(relay.verify().values())
        assert len([t for t in ring.transfers if t.cross_site]) == 2
        direct = relay.publish(states[3], topology="direct")
        assert set(direct.versions.values()) == {3} and all(relay.verify().values())
        assert len(direct.transfers) == 6 and all(t.cross_site for t in direct.transfers)
        bits = [relay.handles[m.name].state.remote() for m in members]
        for state in ray.get(bits):
            for name, tensor in states[3].items():
                assert torch.equal(state[name].view(torch.int16), tensor.view(torch.int16)), name
    finally:
        relay.shutdown()


def test_tensor_parallel_site_gets_only_the_slices_it_holds():
    states = bf16_versions(2)
    specs = [llama_tensor_parallel(states[0], rank, 2) for rank in range(2)]
    members = [Member("tp0a", "east", specs[0]), Member("tp1a", "east", specs[1]), Member("whole", "west")]
    relay = WeightRelay(members, RelayConfig(method="delta", topology="ring"))
    try:
        relay.publish(states[0])
        report = relay.publish(states[1])
        assert all(relay.verify().values())
        into_east, into_west = [t for t in report.transfers if t.cross_site]
        (hop,) = [t for t in report.transfers if not t.cross_site]  # tp0a -> tp1a forwards rank 1's slices only
        assert into_east.nbytes == pytest.approx(hop.nbytes * 2, rel=0.35)
        # Two half-size shard streams, plus what both ranks hold whole (norms) and per-tensor headers, twice.
        assert into_west.nbytes < into_east.nbytes < 2 * into_west.nbytes
        shard = ray.get(relay.handles["tp1a"].state.remote())
        assert shard["model.layers.0.mlp.down_proj.weight"].shape == (64, 64)
        assert ShardSpec() not in {m.layout for m in members[:2]}
    finally:
        relay.shutdown()


def test_detached_members_catch_up_by_chain_or_full_copy():
    states = bf16_versions(5)
    members = [Member("head", "east"), Member("short", "east"), Member("long", "east")]
    relay = WeightRelay(members, RelayConfig(method="delta", history=2, topology="tree"))
    try:
        relay.publish(states[0])
        relay.detach("long")
        relay.publish(states[1])
        relay.publish(states[2])
        relay.detach("short")
        relay.publish(states[3])
        relay.attach("short")
        relay.attach("long")
        report = relay.publish(states[4])
        assert set(report.caught_up) == {"short", "long"}
        assert set(report.versions.values()) == {4} and all(relay.verify().values())
        catch_ups = {t.nbytes for t in report.transfers if t.catch_up}
        # "short" (at 2) gets the chain 2->3->4; "long" (at 0) is past the 2 kept deltas: a full copy.
        chain, full = sorted(catch_ups)
        assert chain < full / 4
    finally:
        relay.shutdown()
