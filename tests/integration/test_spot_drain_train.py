"""``rollarc train`` on the spot config with no injected preemption, and ``ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION`` on a spot worker's node while its job is in flight: the fleet's drain watcher turns
Ray's drain into Spotlight's notice, the worker commits its in-flight latent before the deadline, the node is
taken out at the deadline and a replacement finishes the job; no job is lost or done twice (issue 44, item 1).

The run starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): with
``spot.enabled`` its local cluster is a multi-node ``ray.cluster_utils.Cluster`` (``RayStart.joining_pools``) whose
spot nodes are drained, removed and replaced during the run."""

import json
import re
import threading
import time

import pytest
import ray
from click.testing import CliRunner
from ray.scripts.scripts import cli as ray_cli

from rollarc.cli import main
from rollarc.diffusion.spot_queue import QUEUE_NAME
from tests.integration.test_t2i_train import tiny_overrides

SAMPLE_STEPS = 200  # long enough on the tiny DiT that the drain lands mid-job
DEADLINE_S = 8


def _spot_node(worker: str) -> str:
    """The Ray node id of the fleet's node for ``worker`` (``spotN-gM`` runs on the node with ``spot_node_N_M``)."""
    slot, gen = re.fullmatch(r"spot(\d+)-g(\d+)", worker).groups()
    (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and f"spot_node_{slot}_{gen}" in n["Resources"]]
    return node


def _drain_mid_job(stop: threading.Event, drained: list[tuple[str, int]]) -> None:
    """Wait for a spot worker a few steps into a job, then drain its node with ``ray drain-node`` (in-process)."""
    while not stop.wait(0.02):
        if not ray.is_initialized():
            continue
        queues = [n for n in ray.util.list_named_actors() if n.startswith(f"{QUEUE_NAME}@")]
        if not queues:
            continue
        held = ray.get(ray.get_actor(queues[0]).held.remote(), timeout=60)
        busy = [(w, step) for w, step in held.values() if 2 <= step <= SAMPLE_STEPS // 3]
        if not busy:
            continue
        worker, step = busy[0]
        args = ["drain-node", "--address", ray.get_runtime_context().gcs_address, "--node-id", _spot_node(worker)]
        args += ["--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot VM reclaimed (test)"]
        args += ["--deadline-remaining-seconds", str(DEADLINE_S)]
        result = CliRunner().invoke(ray_cli, args)
        assert result.exit_code == 0, result.output
        drained.append((worker, step))
        return


@pytest.mark.slow
def test_ray_drain_node_on_a_spot_workers_node_commits_its_in_flight_job(tmp_path):
    overrides = [o for o in tiny_overrides(tmp_path) if not o.startswith("train.sample_steps")] + [
        f"train.sample_steps={SAMPLE_STEPS}",
        "cluster.pools.spot.count=1",
        "spot.trace=null",
        "spot.rate_per_hour=0",  # no injected preemption: the only notice is Ray's drain
        "spot.replacement_s=0.0",
        "spot.heartbeat_every=1",
        "spot.lease_s=30.0",  # far longer than the run's wait for the deadline: nothing may expire
        "spot.drain_poll_s=0.05",
    ]
    stop, drained = threading.Event(), []
    drainer = threading.Thread(target=_drain_mid_job, args=(stop, drained), daemon=True)
    drainer.start()
    began = time.monotonic()
    try:
        assert main(["train", "configs/t2i_spot.yaml", *overrides]) == 0
    finally:
        stop.set()
        drainer.join(timeout=60)
    assert drained, f"no spot worker was caught mid-job in {time.monotonic() - began:.0f} s"
    (run_dir,) = list((tmp_path / "runs").iterdir())
    spot = json.loads((run_dir / "summary.json").read_text())["spot"]
    worker = drained[0][0]
    assert (spot["notice_source"], spot["drain_notices"]) == ("ray_drain", 1)
    assert spot["committed_on_notice"] == 1 and spot["lost_steps"] == 0  # the latent came back, not redone
    assert spot["requeued_on_expiry"] == 0 and spot["resumed_steps"] >= 2
    assert (spot["lost_jobs"], spot["duplicate_jobs"]) == (0, 0)
    assert spot["completed"] == spot["submitted"] > 0
    whats = [(what, who) for _, what, who in spot["events"]]
    assert whats.count(("preempted", worker)) == 1  # taken out at the deadline, replaced
    assert [who for what, who in whats if what.startswith("notice from Ray drain")] == [worker]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["spot_drain_notices"] == 1
