"""Publisher and receiver: versions, delta chains versus full copies by bytes, and recovery from a wrong base."""

from __future__ import annotations

import pytest
import torch

from rollarc.sync.codec import state_checksums
from rollarc.sync.config import SyncConfig
from rollarc.sync.shard import ShardSpec, extract_shard, llama_tensor_parallel
from rollarc.sync.versions import VersionGap, WeightPublisher, WeightReceiver

DELTA = SyncConfig(method="delta", history=4, bucket_mb=0.01)


def versions(count: int, fraction: float, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``count`` consecutive bf16 states; each changes about ``fraction`` of the previous one's elements."""
    gen = torch.Generator().manual_seed(seed)
    state = {
        "a": torch.randn(96, 64, generator=gen).to(torch.bfloat16),
        "b": torch.randn(500, generator=gen).to(torch.bfloat16),
    }
    out = [state]
    for _ in range(count - 1):
        state = {n: t.clone() for n, t in state.items()}
        for tensor in state.values():
            mask = torch.rand(tensor.shape, generator=gen) < fraction
            tensor[mask] = (tensor[mask].float() * 1.5 + 0.01).to(torch.bfloat16)
        out.append(state)
    return out


def test_new_receiver_gets_a_full_copy_then_single_deltas():
    states = versions(3, 0.02)
    pub, rec = WeightPublisher(DELTA), WeightReceiver()
    pub.publish(states[0])
    report = rec.sync(pub.fetch)
    assert report.full and report.version == 0 and state_checksums(rec.state) == state_checksums(states[0])
    for v in (1, 2):
        pub.publish(states[v])
        report = rec.sync(pub.fetch)
        assert not report.full and report.updates == 1 and report.version == v
        assert report.nbytes < pub.full_nbytes(ShardSpec()) / 5
        assert state_checksums(rec.state) == state_checksums(states[v])
    assert rec.sync(pub.fetch).updates == 0


def test_receiver_that_missed_versions_gets_the_chain_when_it_is_smaller():
    states = versions(5, 0.02)
    pub = WeightPublisher(DELTA)
    for s in states[:2]:
        pub.publish(s)
    rec = WeightReceiver()
    rec.sync(pub.fetch)  # at version 1
    for s in states[2:]:
        pub.publish(s)
    updates = pub.fetch(ShardSpec(), 1)
    assert [(u.base_version, u.version) for u in updates] == [(1, 2), (2, 3), (3, 4)]
    rec.apply(updates)
    assert rec.version == 4 and state_checksums(rec.state) == state_checksums(states[4])


def test_full_copy_when_the_chain_would_be_larger_or_is_gone():
    dense = versions(4, 0.9)  # every delta is about as large as the weights
    pub = WeightPublisher(DELTA)
    for s in dense:
        pub.publish(s)
    (update,) = pub.fetch(ShardSpec(), 0)
    assert update.full and update.version == 3
    short = WeightPublisher(SyncConfig(method="delta", history=1))
    for s in versions(4, 0.01):
        short.publish(s)
    assert [u.full for u in short.fetch(ShardSpec(), 1)] == [True]  # only 2->3 is kept
    assert [u.base_version for u in short.fetch(ShardSpec(), 2)] == [2]


def test_method_full_always_sends_full_copies():
    pub = WeightPublisher(SyncConfig(method="full"))
    rec = WeightReceiver()
    for s in versions(3, 0.01):
        pub.publish(s)
        assert rec.sync(pub.fetch).full
    assert rec.version == 2


def test_wrong_base_is_detected_and_recovered_with_a_full_copy():
    states = versions(3, 0.05)
    pub, rec = WeightPublisher(DELTA), WeightReceiver()
    pub.publish(states[0])
    rec.sync(pub.fetch)
    rec.state["a"].view(torch.int16)[3, 3] ^= 1  # the receiver's copy drifted from version 0
    pub.publish(states[1])
    report = rec.sync(pub.fetch)
    assert report.recovered and report.full and rec.version == 1
    assert state_checksums(rec.state) == state_checksums(states[1])


def test_apply_refuses_a_gap_and_a_foreign_layout():
    states = versions(3, 0.05)
    pub, rec = WeightPublisher(DELTA), WeightReceiver()
    pub.publish(states[0])
    rec.sync(pub.fetch)
    pub.publish(states[1])
    pub.publish(states[2])
    with pytest.raises(VersionGap, match="does not start at the receiver's version 0"):
        rec.apply(pub.latest(ShardSpec()))  # 1 -> 2 only
    spec = ShardSpec.of({"a": (0, 0, 2)})
    pub.register(spec)
    with pytest.raises(ValueError, match="sent to a receiver of whole model"):
        rec.apply(pub.fetch(spec, None))


def test_versions_must_increase():
    pub = WeightPublisher(DELTA)
    pub.publish(versions(1, 0)[0], version=7)
    with pytest.raises(ValueError, match="published 7, got 7"):
        pub.publish(versions(1, 0)[0], version=7)


def test_tensor_parallel_receivers_get_only_their_shard():
    gen = torch.Generator().manual_seed(1)
    base = {
        "layers.0.self_attn.q_proj.weight": torch.randn(32, 16, generator=gen).to(torch.bfloat16),
        "layers.0.self_attn.o_proj.weight": torch.randn(16, 32, generator=gen).to(torch.bfloat16),
        "norm.weight": torch.ones(16, dtype=torch.bfloat16),
    }
    nxt = {n: t.clone() for n, t in base.items()}
    nxt["layers.0.self_attn.q_proj.weight"][::3] += 1
    nxt["layers.0.self_attn.o_proj.weight"][:, ::3] += 1
    pub = WeightPublisher(DELTA)
    specs = [llama_tensor_parallel(base, rank, 2) for rank in range(2)]
    for spec in specs:
        pub.register(spec)
    pub.publish(base)
    receivers = [WeightReceiver(spec) for spec in specs]
    for rec in receivers:
        rec.sync(pub.fetch)
    pub.publish(nxt)
    for rank, rec in enumerate(receivers):
        report = rec.sync(pub.fetch)
        assert not report.full
        for name, tensor in nxt.items():
            split = rec.layout.split_of(name)
            want = extract_shard(tensor, split) if split else tensor
            assert torch.equal(rec.state[name].view(torch.int16), want.view(torch.int16)), (rank, name)
    assert rec.state["layers.0.self_attn.q_proj.weight"].shape == (16, 16)
    whole = pub.full_nbytes(ShardSpec())
    assert sum(pub.full_nbytes(spec) for spec in specs) < 1.3 * whole


def test_publisher_sends_floats_in_the_configured_dtype_only():
    pub = WeightPublisher(SyncConfig(method="delta", dtype="bfloat16"))
    pub.publish({"w": torch.tensor([1.0, 1.0 + 2**-10]), "steps": torch.tensor([3])})
    rec = WeightReceiver()
    rec.sync(pub.fetch)
    assert rec.state["w"].dtype == torch.bfloat16 and rec.state["w"].tolist() == [1.0, 1.0]
    assert rec.state["steps"].dtype == torch.int64
