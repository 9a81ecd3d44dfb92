"""How pools become Ray resources (no Ray started): the laptop path is unchanged, a joined cluster uses real GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollarc.config import ClusterConfig, load_train_config
from rollarc.runtime.ray_cluster import (
    ClusterResourceError,
    accelerator_resource,
    actor_options,
    check_local_gpus,
    gpu_demand,
    is_gpu_kind,
    pool_capacity,
)


def _cfg(address: str | None = None, **h800: object) -> ClusterConfig:
    return ClusterConfig.model_validate(
        {
            "address": address,
            "pools": {"train": {"count": 4, "kind": "h800", **h800}, "cpu": {"count": 8, "kind": "cpu"}},
            "roles": {
                "train": {"pool": "train", "units": 2},
                "rollout": {"pool": "train", "units": 0.5},
                "env": {"pool": "cpu"},
            },
        }
    )


def test_gpu_kinds_come_from_the_catalogue() -> None:
    assert is_gpu_kind("h800") and is_gpu_kind("h20") and is_gpu_kind("h200")
    assert not is_gpu_kind("cpu")
    assert accelerator_resource("h800") == "accelerator_type:H800"


def test_laptop_pools_stay_logical_resources() -> None:
    cfg = _cfg()
    options = actor_options(cfg, cfg.roles.train)
    assert options["resources"] == {"pool_train": 2.0} and options["num_cpus"] == 0 and "num_gpus" not in options


def test_local_machine_with_gpus_adds_num_gpus_to_the_logical_pool() -> None:
    cfg = _cfg()
    options = actor_options(cfg, cfg.roles.rollout[0], gpus=True)
    assert options["resources"] == {"pool_train": 0.5} and options["num_gpus"] == 0.5


def test_joined_cluster_asks_real_gpus_of_the_pool_kind() -> None:
    cfg = _cfg(address="10.0.0.1:6379")
    train = actor_options(cfg, cfg.roles.train, gpus=True)
    assert train["num_gpus"] == 2.0 and train["resources"] == {"accelerator_type:H800": 0.001}
    env = actor_options(cfg, cfg.roles.env, gpus=True)
    assert env["resources"] == {"pool_cpu": 1.0} and "num_gpus" not in env


def test_joined_cluster_with_a_named_resource_uses_it_with_the_gpus() -> None:
    cfg = _cfg(address="10.0.0.1:6379", resource="node_type_train")
    train = actor_options(cfg, cfg.roles.train, gpus=True)
    assert train["num_gpus"] == 2.0 and train["resources"] == {"node_type_train": 2.0}


def test_pool_capacity_counts_gpus_on_nodes_of_the_kind() -> None:
    nodes = [
        {"Alive": True, "Resources": {"GPU": 8.0, "accelerator_type:H800": 1.0}},
        {"Alive": True, "Resources": {"GPU": 8.0, "accelerator_type:H20": 1.0}},
        {"Alive": False, "Resources": {"GPU": 8.0, "accelerator_type:H800": 1.0}},
        {"Alive": True, "Resources": {"CPU": 64.0, "pool_cpu": 64.0}},
    ]
    have = pool_capacity(_cfg(address="x:1"), True, {"pool_cpu": 64.0, "GPU": 16.0}, nodes)
    assert have == {"train": ("GPUs on nodes with accelerator_type:H800", 8.0), "cpu": ("pool_cpu", 64.0)}
    local = pool_capacity(_cfg(), False, {"pool_train": 4.0, "pool_cpu": 8.0}, nodes)
    assert local == {"train": ("pool_train", 4.0), "cpu": ("pool_cpu", 8.0)}


def test_gpu_cluster_example_loads_and_maps_onto_real_gpus() -> None:
    cfg = load_train_config(Path(__file__).resolve().parents[2] / "configs" / "gpu_cluster_example.yaml")
    assert (cfg.model.device, cfg.model.dtype, cfg.engine.dtype) == ("cuda", "bfloat16", None)
    joined = cfg.cluster.model_copy(update={"address": "head:6379"})
    train = actor_options(joined, joined.roles.train, gpus=True)
    rollout = actor_options(joined, joined.roles.rollout[0], gpus=True)
    env = actor_options(joined, joined.roles.env, gpus=True)
    assert train["num_gpus"] == 1 and train["resources"] == {"accelerator_type:H100": 0.001}
    assert joined.roles.train.replicas == 4  # 4 FSDP2 ranks: every GPU the train role reserves computes
    assert rollout["num_gpus"] == 1 and joined.roles.rollout[0].replicas == 4
    assert env["resources"] == {"pool_cpu": 8.0} and "num_gpus" not in env


def test_local_gpu_demand_must_fit_the_machine() -> None:
    cfg = _cfg()  # train 1 x 2 units + rollout 1 x 0.5 units on the h800 pool; env on the cpu pool
    assert gpu_demand(cfg) == 2.5
    check_local_gpus(cfg, 4.0)
    with pytest.raises(ClusterResourceError, match=r"reserve 2\.5 GPUs but this machine has 1"):
        check_local_gpus(cfg, 1.0)
