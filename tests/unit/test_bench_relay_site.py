"""``rollarc bench weightsync``'s in-process site and cases: the training relay's bytes, checked bit for bit."""

from __future__ import annotations

from pathlib import Path

import torch

from rollarc.bench.relay_site import InProcessSite, bitwise_equal
from rollarc.bench.weightsync_cases import FINE_TUNING_LR, STAND_IN, all_cases
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher, updates_nbytes


def step(state: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    new = {name: t.clone() for name, t in state.items()}
    new["a"][:rows] += 0.5
    return new


def test_one_copy_crosses_in_shards_fans_out_and_every_member_ends_bitwise_equal():
    gen = torch.Generator().manual_seed(0)
    state = {"a": torch.randn(48, 16, generator=gen), "b": torch.randn(8, generator=gen), "s": torch.tensor(2.0)}
    publisher = WeightPublisher(SyncConfig(method="delta", dtype="bfloat16"))
    publisher.publish(state)
    site = InProcessSite(publisher, members=3, fanout=1)
    assert len(site.layouts) == 3 and site.full_copy_bytes == (48 * 16 + 8 + 1) * 4
    state = step(state, 5)
    publisher.publish(state)
    shards = [updates_nbytes(publisher.latest(layout)) for layout in site.layouts]
    totals = site.push()
    # each shard once into the site, to its owner; then forwarded to the 2 other members (fanout 1: a chain)
    assert totals == {"cross_site_bytes": sum(shards), "in_site_bytes": 2 * sum(shards), "sync_full_copies": 0}
    assert site.mismatched() == []
    assert bitwise_equal(site.members["borrowed-2"].receiver.weights(), publisher.shard(WHOLE))


def test_the_bitwise_check_names_a_member_whose_weights_differ_in_one_bit():
    publisher = WeightPublisher(SyncConfig(method="delta", dtype="bfloat16"))
    publisher.publish({"a": torch.ones(4, 4)})
    site = InProcessSite(publisher, members=2, fanout=2)
    publisher.publish({"a": torch.full((4, 4), 2.0)})
    site.push()
    shard = site.members["borrowed-1"].receiver.receivers[site.layouts[0]].state["a"]
    shard.view(torch.int16)[0, 0] ^= 1  # the version still says it is current
    assert site.mismatched() == ["borrowed-1"]


def test_bitwise_equal_tells_signed_zeros_apart_where_equality_does_not():
    zero, minus = {"x": torch.zeros(3)}, {"x": torch.tensor([0.0, -0.0, 0.0])}
    assert torch.equal(zero["x"], minus["x"]) and not bitwise_equal(zero, minus)
    assert bitwise_equal(zero, {"x": torch.zeros(3)}) and not bitwise_equal(zero, {"y": torch.zeros(3)})


TASKS = "tasks: [{name: t, env: {id: frozen_lake}}]\n"


def test_cases_are_the_delta_and_harvest_configs_plus_the_fine_tuning_lr_merged_when_equal(tmp_path: Path):
    (tmp_path / "plain.yaml").write_text("name: plain\ntrain: {lr: 0.001}\n" + TASKS)
    (tmp_path / "delta.yaml").write_text(
        "name: d\nmodel: {preset: nano}\ntrain: {lr: 0.0003, weight_decay: 0.01}\nsync: {method: delta, dtype: bfloat16}\n"
        + TASKS
    )
    (tmp_path / "big.yaml").write_text(
        "name: big\nmodel: {path: nowhere/Qwen}\ntrain: {lr: 1.0e-6}\nsync: {method: delta, dtype: bfloat16}\n" + TASKS
    )
    cases = {c.name: c for c in all_cases(tmp_path, quick=False)}
    assert set(cases) == {
        f"{tmp_path.name}/big.yaml + fine-tuning lr",  # a checkpoint path: the stand-in, at the same lr and sync
        f"{tmp_path.name}/delta.yaml",
        "fine-tuning lr, tiny (reference)",
    }
    delta = cases[f"{tmp_path.name}/delta.yaml"]
    assert (delta.model, delta.lr, delta.weight_decay, delta.sync.dtype) == ("nano", 3e-4, 0.01, "bfloat16")
    big = cases[f"{tmp_path.name}/big.yaml + fine-tuning lr"]
    assert (big.model, big.lr, big.members, big.fanout) == (STAND_IN, FINE_TUNING_LR, 2, 2)
