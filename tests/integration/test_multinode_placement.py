"""Multi-node placement on ``ray.cluster_utils.Cluster``: each role lands on a node of its pool; a missing pool fails fast.

Two Ray "nodes" on one machine, each started with its own pool resource (as ``ray start --resources``
would on a real cluster). rollarc joins the cluster by address (the ``--address`` path) and places tiny
actors with its own ``actor_options``, so what is tested is rollarc's placement, not a training run.

It starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): placement by pool
is checked on two nodes that each carry one pool, and one test starts a new local cluster beside that one on purpose.
"""

from __future__ import annotations

import pytest
import ray
from ray.cluster_utils import Cluster

from rollarc.config import ClusterConfig
from rollarc.runtime.ray_cluster import (
    ClusterResourceError,
    actor_options,
    start_ray,
    stop_ray,
    uses_gpus,
)

pytestmark = pytest.mark.slow


@ray.remote
class Where:
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"pool_compute": 2}})
    worker = cluster.add_node(num_cpus=1, resources={"pool_cpu": 4})
    cluster.wait_for_nodes()
    yield cluster, cluster.head_node.node_id, worker.node_id
    ray.shutdown()
    cluster.shutdown()


def _cluster_config(address: str, **pools: dict) -> ClusterConfig:
    return ClusterConfig.model_validate(
        {
            "address": address,
            "pools": {"compute": {"count": 2, "kind": "cpu"}, "cpu": {"count": 4, "kind": "cpu"}, **pools},
            "roles": {
                "train": {"pool": "compute"},
                "rollout": {"pool": "compute"},
                "env": {"pool": "cpu", "replicas": 2},
            },
        }
    )


def test_each_role_lands_on_a_node_of_its_pool(two_nodes) -> None:
    cluster, compute_node, cpu_node = two_nodes
    cfg = _cluster_config(cluster.address)
    start_ray(cfg, cluster.address, device="cpu")
    assert uses_gpus(cfg, "cpu")  # an existing cluster: GPU-kind pools would reserve real GPUs
    roles = cfg.roles
    placed = {
        "train": Where.options(**actor_options(cfg, roles.train)).remote(),
        "rollout": Where.options(**actor_options(cfg, roles.rollout[0])).remote(),
        "env-0": Where.options(**actor_options(cfg, roles.env, name="env-0")).remote(),
        "env-1": Where.options(**actor_options(cfg, roles.env, name="env-1")).remote(),
    }
    nodes = {role: ray.get(handle.node_id.remote(), timeout=60) for role, handle in placed.items()}
    assert nodes == {"train": compute_node, "rollout": compute_node, "env-0": cpu_node, "env-1": cpu_node}
    assert compute_node != cpu_node


def test_a_pool_that_no_node_has_fails_at_start_up_with_its_name(two_nodes) -> None:
    cluster, _, _ = two_nodes
    cfg = _cluster_config(cluster.address, far={"count": 1, "kind": "cpu"}, gpus={"count": 8, "kind": "h100"})
    with pytest.raises(ClusterResourceError) as error:
        start_ray(cfg, cluster.address, device="cpu")
    message = str(error.value)
    assert "pool_far (need 1, have 0)" in message
    assert "GPUs on nodes with accelerator_type:H100 (need 8, have 0)" in message
    assert "pool_compute" not in message and "\n" not in message
    assert not ray.is_initialized()


def test_cuda_on_a_cluster_without_gpus_fails_at_start_up(two_nodes) -> None:
    cluster, _, _ = two_nodes
    with pytest.raises(ClusterResourceError, match=r"model\.device is 'cuda' but the Ray cluster has no GPU"):
        start_ray(_cluster_config(cluster.address), cluster.address, device="cuda")
    assert not ray.is_initialized()


def test_without_an_address_a_new_local_cluster_starts_even_beside_another(two_nodes) -> None:
    """Regression: Ray joins the last cluster `ray start` (or Cluster) recorded when ``ray.init`` has no address;
    a local run then failed with "When connecting to an existing cluster, num_cpus ... must not be provided"."""
    cluster, _, _ = two_nodes
    cfg = ClusterConfig.model_validate(
        {
            "num_cpus": 1,
            "pools": {"compute": {"count": 3, "kind": "cpu"}, "cpu": {"count": 5, "kind": "cpu"}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        }
    )
    try:
        resources = start_ray(cfg, device="cpu")
        assert ray.get_runtime_context().gcs_address != cluster.address
        assert (resources["pool_compute"], resources["pool_cpu"]) == (3.0, 5.0)  # this config's pools, not the other's
    finally:
        stop_ray()
