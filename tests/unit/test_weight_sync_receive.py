"""The runtime's receive path: pushed deltas, catch-up after a missed version, recovery from a bad base."""

from __future__ import annotations

import asyncio

import torch

from rollarc.runtime.weight_sync import engine_weights, receive
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher, WeightReceiver


def states(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    base = {"w": torch.randn(64, 32, generator=g), "b": torch.randn(32, generator=g)}
    out = [base]
    for _ in range(n - 1):
        prev = out[-1]
        # a sparse, RL-sized change: a few elements move
        nxt = {k: v.clone() for k, v in prev.items()}
        nxt["w"][torch.randint(0, 64, (5,), generator=g), torch.randint(0, 32, (5,), generator=g)] += 0.5
        out.append(nxt)
    return out


def setup(method: str = "delta"):
    cfg = SyncConfig(method=method, dtype="bfloat16")
    versions = states(4)
    pub = WeightPublisher(cfg)
    pub.publish(versions[0], version=0)
    start = WeightPublisher(cfg)
    start.publish(versions[0], version=0)
    receiver = WeightReceiver(WHOLE, state=dict(start.shard(WHOLE)), version=0)
    return pub, receiver, versions


def fetcher(pub: WeightPublisher, calls: list):
    async def fetch(have):
        calls.append(have)
        return pub.fetch(WHOLE, have)

    return fetch


def test_pushed_delta_applies_and_matches_bf16_weights():
    pub, receiver, versions = setup()
    pub.publish(versions[1], version=1)
    (update,) = pub.latest(WHOLE)
    assert not update.full and update.base_version == 0
    calls: list = []
    report = asyncio.run(receive(receiver, (update,), fetcher(pub, calls)))
    assert report.version == 1 and not report.recovered and calls == []
    weights = engine_weights(receiver, {"w": versions[1]["w"], "b": versions[1]["b"]})
    assert weights["w"].dtype == torch.float32
    assert torch.equal(weights["w"], versions[1]["w"].to(torch.bfloat16).float())


def test_a_receiver_that_missed_a_version_catches_up_by_chain():
    pub, receiver, versions = setup()
    pub.publish(versions[1], version=1)
    pub.publish(versions[2], version=2)
    calls: list = []
    report = asyncio.run(receive(receiver, pub.latest(WHOLE), fetcher(pub, calls)))
    assert calls == [0] and report.recovered and report.version == 2
    assert torch.equal(receiver.state["w"], versions[2]["w"].to(torch.bfloat16))


def test_a_wrong_base_is_detected_and_replaced_by_a_full_copy():
    pub, receiver, versions = setup()
    receiver.state["w"][0, 0] += 1.0  # the receiver's copy silently drifted
    pub.publish(versions[1], version=1)
    calls: list = []
    report = asyncio.run(receive(receiver, pub.latest(WHOLE), fetcher(pub, calls)))
    assert calls == [None] and report.recovered and report.version == 1
    assert torch.equal(receiver.state["w"], versions[1]["w"].to(torch.bfloat16))


def test_full_method_sends_full_copies():
    pub, receiver, versions = setup("full")
    pub.publish(versions[1], version=1)
    (update,) = pub.latest(WHOLE)
    assert update.full
    asyncio.run(receive(receiver, (update,), fetcher(pub, [])))
    assert torch.equal(receiver.state["b"], versions[1]["b"].to(torch.bfloat16))
