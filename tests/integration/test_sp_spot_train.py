"""``rollarc train`` on the spot config with ``cluster.sp_degree: 2``: the sampler samples through an SP group
of two, and the spot explorer's second member runs on a spot node of its own. That node is drained through Ray's
drain API, by the injector (a trace with one notice) or by ``ray drain-node`` (an operator or the autoscaler);
the drain watcher orders the explorer to let that member go, the survivor regroups (the worker's node is not
lost, no job committed or redone), the member's node is removed at the deadline, a member rejoins from a peer on
a new node, and metrics.jsonl and summary.json count it.

The run starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): with
``spot.enabled`` its local cluster is a multi-node ``ray.cluster_utils.Cluster`` (``RayStart.joining_pools``) whose
spot nodes are added, drained and removed during the run."""

import json
import threading

import pytest
import ray
from click.testing import CliRunner
from ray.scripts.scripts import cli as ray_cli

from rollarc.cli import main
from rollarc.diffusion.spot_queue import QUEUE_NAME
from tests.integration.test_t2i_train import tiny_overrides

MEMBER_RESOURCE = "spot_member_0_0_1"  # slot 0, generation 0, the member its group started second


def _drain_member_node(stop: threading.Event, drained: list[str]) -> None:
    """Once the explorer's SP group is up, ``ray drain-node`` its second member's node (in-process)."""
    while not stop.wait(0.02):
        if not ray.is_initialized():
            continue
        queues = [n for n in ray.util.list_named_actors() if n.startswith(f"{QUEUE_NAME}@")]
        if not queues or not ray.get(ray.get_actor(queues[0]).sp_group_up.remote("spot0-g0"), timeout=60):
            continue
        (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and MEMBER_RESOURCE in n["Resources"]]
        args = ["drain-node", "--address", ray.get_runtime_context().gcs_address, "--node-id", node]
        args += ["--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot VM reclaimed (test)"]
        args += ["--deadline-remaining-seconds", "1"]
        result = CliRunner().invoke(ray_cli, args)
        assert result.exit_code == 0, result.output
        drained.append(node)
        return


@pytest.mark.slow
@pytest.mark.parametrize("drainer", ["injector", "ray drain-node"])
def test_a_drained_member_node_regroups_the_explorers_sp_group_during_training(tmp_path, drainer):
    trace = tmp_path / "trace.yaml"
    trace.write_text("preemptions:\n  - {at_s: 0.0, slot: 0, notice_s: 1.0}\n")
    skip = ("explore.", "train.steps=", "train.eval_every=")
    overrides = [o for o in tiny_overrides(tmp_path) if not o.startswith(skip)] + [
        # steps after the first take about 0.1 s here: 20 of them take the run past the 1-s deadline, so the fleet's
        # next call removes a node that an operator drained (the injector removes the nodes it drains itself)
        "train.steps=20",
        "train.eval_every=10",
        "explore.enabled=true",
        "explore.candidates=4",
        "cluster.sp_degree=2",
        "cluster.pools.spot.count=1",
        "spot.target=slot",
        "spot.replacement_s=0.0",
        "model.device=auto",  # each actor resolves it (here: the CPU); the local spot explorers reserve no GPU
    ]
    overrides += [f"spot.trace={trace}"] if drainer == "injector" else ["spot.trace=null", "spot.rate_per_hour=0"]
    stop, drained = threading.Event(), []
    thread = threading.Thread(target=_drain_member_node, args=(stop, drained), daemon=True)
    if drainer == "ray drain-node":
        thread.start()
    try:
        assert main(["train", "configs/t2i_spot.yaml", *overrides]) == 0
    finally:
        stop.set()
        if thread.ident is not None:
            thread.join(timeout=60)
    (run_dir,) = list((tmp_path / "runs").iterdir())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["sp_degree"] for r in rows] == [2] * 20  # the sampler's groups were drawn through SP 2
    spot = json.loads((run_dir / "summary.json").read_text())["spot"]
    assert rows[-1]["spot_sp_regroups"] == spot["sp_regroups"] == 1
    assert spot["sp_degrees_after"][0] == 1  # two members minus the noticed one: the survivor alone
    # the regroup's baseline, timed in the same run: the one explorer's SP group started cold (new actors,
    # weights from disk; the noticed member rejoins from a peer, not cold); the ratio is the run's own
    (cold,) = spot["sp_cold_start_s"]
    (regroup,) = spot["sp_regroup_s"]
    assert cold > 0 and regroup > 0
    assert spot["sp_recovery_speedup"] == pytest.approx(cold / regroup, rel=1e-2)  # the lists are rounded
    assert spot["sp_joins"] in (0, 1)  # the rejoin is ordered at the next fleet call; the run may end first
    assert spot["sp_degrees_after"][1:] == [2] * spot["sp_joins"]
    assert (spot["lost_jobs"], spot["duplicate_jobs"]) == (0, 0)
    assert (spot["committed_on_notice"], spot["requeued_on_expiry"]) == (0, 0)  # the node was never lost
    assert spot["preemptions"] == 1 and list(spot["spot_node_seconds"]) == ["spot0-g0"]
    # the members said where they run: the first on the worker's node, the second on a node of its own, which was
    # drained through Ray (the notice reached the worker from the drain watcher) and then removed
    worker_node, member_node = spot["sp_member_nodes"]["spot0-g0"]
    assert worker_node == spot["worker_nodes"]["spot0-g0"] != member_node == spot["member_nodes"]["spot0-g0#m1"]
    assert drained == ([member_node] if drainer == "ray drain-node" else [])
    assert spot["drain_notices"] == 1 and spot["notice_source"] == "ray_drain"
    events = [(what, who) for _, what, who in spot["events"]]
    if drainer == "injector":
        assert ("drain (1 s) of an SP member's node", "spot0-g0#m1") in events
    assert [who for what, who in events if what.startswith("notice from Ray drain")] == ["spot0-g0#m1"]
    assert ("SP member's node removed", "spot0-g0#m1") in events
    assert "spot0-g0#m1" in spot["spot_member_node_seconds"]
    # a rejoining member gets a new node of its own (the group's third member ever started; the node is added
    # when the rejoin is ordered, which the run may end before the explorer obeys)
    assert (
        {"spot0-g0#m1", "spot0-g0#m2"}
        >= set(spot["member_nodes"])
        >= {"spot0-g0#m1"} | ({"spot0-g0#m2"} if spot["sp_joins"] else set())
    )
    assert len(set(spot["member_nodes"].values()) | {worker_node}) == 1 + len(spot["member_nodes"])
