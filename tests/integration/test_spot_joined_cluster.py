"""``rollarc train --address`` on a running multi-node Ray cluster: explorers run only on the nodes that carry the
spot pool's resource (one that joins mid-run included), a spot node drained for preemption mid-run loses its worker
at the deadline and nothing is lost, and every node of the cluster is still there after the run: the fleet neither
adds nor removes nodes it did not start (issue 44, item 2).

The driver is a subprocess, as a user's would be: the test owns the cluster, and ``Cluster.add_node`` (the spot
node joining mid-run) works on a main thread only. It is the test's own cluster, not the suite's shared one
(tests/integration/shared_ray.py): it needs several nodes, spot and not, adds one mid-run and drains another."""

import json
import os
import subprocess
import sys
import time

import pytest
import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from rollarc.diffusion.drain_watcher import drain
from tests.integration.test_t2i_train import tiny_overrides

RUN_TIMEOUT_S = 600
DEADLINE_S = 3.0


def _node_ids() -> dict[str, bool]:
    return {n["NodeID"]: n["Alive"] for n in ray.nodes()}


def _spot_workers() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("spot")]


@pytest.mark.slow
def test_a_t2i_run_joins_a_cluster_and_explores_only_on_its_spot_nodes(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"pool_compute": 2}})
    try:
        other = cluster.add_node(num_cpus=1)  # not spot: no explorer may land here
        spot = [cluster.add_node(num_cpus=0, resources={"pool_spot": 1}) for _ in range(2)]
        ray.init(address=cluster.address)  # this test's own view of the cluster
        before = _node_ids()
        overrides = [o for o in tiny_overrides(tmp_path) if not o.startswith("train.steps")]
        overrides += ["train.steps=6", "spot.node_poll_s=0.2", "spot.lease_s=30.0"]
        env = {**os.environ, ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR: str(int(ray_constants.ENABLE_RAY_CLUSTER))}
        cmd = [sys.executable, "-m", "rollarc.cli", "train", "configs/t2i_spot_cluster.yaml", *overrides]
        cmd += ["--address", cluster.address]
        log = tmp_path / "train.log"
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            began = time.monotonic()
            while len(_spot_workers()) < 2 and proc.poll() is None and time.monotonic() - began < RUN_TIMEOUT_S:
                time.sleep(0.2)
            late = cluster.add_node(num_cpus=0, resources={"pool_spot": 1})  # a spot node joins mid-run
            drain(spot[0].node_id, DEADLINE_S, "spot VM reclaimed (test)")  # and one is reclaimed, with notice
            assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
        (run_dir,) = list((tmp_path / "runs").iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())
        stats = summary["spot"]
        spot_ids = {n.node_id for n in [*spot, late]}
        assert summary["ray_address"] == cluster.address and stats["joined_cluster"] is True
        assert set(stats["spot_nodes"]) == spot_ids  # the late node got a slot too
        # where each explorer says it ran (its own node id, in every result): spot nodes only
        assert stats["explorer_nodes"] and set(stats["explorer_nodes"]) <= spot_ids
        assert not {cluster.head_node.node_id, other.node_id} & set(stats["explorer_nodes"])
        (drained,) = [w for w, node in stats["worker_nodes"].items() if node == spot[0].node_id]
        whats = [(what, who) for _, what, who in stats["events"]]
        assert whats.count(("preempted", drained)) == 1 and stats["drain_notices"] == 1
        assert (stats["lost_jobs"], stats["duplicate_jobs"], stats["preemptions"]) == (0, 0, 1)
        assert stats["completed"] == stats["submitted"] > 0
        # the fleet removed no node: every node but the drained one is alive (Ray itself ends a node drained for
        # preemption once it is idle, as the provider would at the deadline)
        after = _node_ids()
        assert all(after[n] for n in before if n != spot[0].node_id) and after[late.node_id]
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        # 4 slots on 3 spot units, one of them draining: 2 explorers at the end (the drained slot stays empty)
        assert (rows[-1]["spot_explorers"], rows[-1]["spot_drain_notices"]) == (2, 1)
    finally:
        ray.shutdown()
        cluster.shutdown()
