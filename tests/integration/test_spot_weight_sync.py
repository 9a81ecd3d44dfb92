"""Spot explorers take new DiT versions through rollarc.sync on Ray: a worker holding the previous version
applies the delta, a replacement that joined with the run's start weights catches up with a full copy, and
both then hold the trainer's weights bitwise (checksums) and draw the trainer's images.

It starts a Ray cluster of its own (``ray.cluster_utils.Cluster``), not the suite's shared one
(tests/integration/shared_ray.py): the fleet adds a node for the spot worker, removes it and adds its replacement's."""

import pytest
import ray
import torch
from ray.cluster_utils import Cluster

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sampling import sample_sde
from rollarc.diffusion.spot_fleet import SpotFleet
from rollarc.diffusion.spot_queue import HEAD_RESOURCE
from rollarc.diffusion.tasks.registry import make_task, vocabulary
from rollarc.diffusion.weight_sync import dit_publisher
from rollarc.diffusion.workers import reward_table, score
from rollarc.sync.codec import state_checksums
from rollarc.sync.versions import WHOLE

STEPS = 3


def _train_step(policy, opt, seed):
    g = torch.Generator().manual_seed(seed)
    loss = sum((p * torch.randn(p.shape, generator=g)).sum() for p in policy.transformer.parameters())
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.slow
def test_spot_worker_takes_the_delta_and_a_replacement_a_full_copy(tmp_path):
    torch.set_num_threads(1)  # as the workers, so the expected images are bitwise theirs
    tasks = [make_task("compositional", tmp_path)]
    trainer = build_policy(vocabulary(tasks), 16, 16, 1, 2, seed=0)
    trainer.save(tmp_path / "policy")  # version 0: what every worker, replacements included, loads from disk
    opt = torch.optim.AdamW(trainer.transformer.parameters(), lr=1e-2, weight_decay=0.0)
    publisher = dit_publisher(trainer.transformer.state_dict(), 0)
    table = reward_table(tasks)
    prompt, seeds = tasks[0].prompts()[0], [5, 6]

    def next_version(version):
        _train_step(trainer, opt, version)
        publisher.publish(trainer.transformer.state_dict(), version)
        update = publisher.latest(WHOLE)
        assert not update[0].full  # a delta from the version before
        expected = score(table, [prompt] * 2, sample_sde(trainer.eval(), [prompt] * 2, seeds, STEPS, 0.7, 0).images())
        return update, expected, state_checksums(trainer.transformer.state_dict())

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {HEAD_RESOURCE: 1}})
    ray.init(address=cluster.address)
    fleet = None
    try:
        fleet = SpotFleet(
            cluster,
            "pool_spot",
            1,
            [],
            0.0,
            30.0,
            (str(tmp_path / "policy"), ["compositional"], str(tmp_path), 1),
            0,
            0.7,
        )
        update1, expected1, sums1 = next_version(1)
        fleet.set_weights(ray.put(update1), ray.put((publisher.full(WHOLE),)), 1)
        explored1 = fleet.wait(fleet.launch([prompt], [seeds], STEPS, version=1))
        after_delta = fleet.stats()
        held1 = ray.get(fleet.queue.held_weights.remote("spot0-g0"))

        assert fleet.preempt(0, notice_s=0.0)  # idle: the node goes; its replacement loads version 0 from disk
        fleet.replace(0)
        update2, expected2, sums2 = next_version(2)
        fleet.set_weights(ray.put(update2), ray.put((publisher.full(WHOLE),)), 2)
        explored2 = fleet.wait(fleet.launch([prompt], [seeds], STEPS, version=2))
        after_full = fleet.stats()
        held2 = ray.get(fleet.queue.held_weights.remote("spot0-g1"))
    finally:
        if fleet is not None:
            fleet.close()
        ray.shutdown()
        cluster.shutdown()
    assert (after_delta["sync_bytes"], after_delta["sync_full_copies"], after_delta["syncs"]) == (
        update1[0].nbytes,
        0,
        1,
    )
    assert held1 == (1, sums1)  # the worker's weights are the trainer's, bitwise
    assert explored1["rewards"] == [expected1]
    full_bytes = publisher.full_nbytes(WHOLE)
    assert (after_full["sync_bytes"], after_full["sync_full_copies"], after_full["syncs"]) == (
        update1[0].nbytes + full_bytes,
        1,
        2,
    )
    assert held2 == (2, sums2)  # the replacement caught up from version 0 with one full copy
    assert explored2["rewards"] == [expected2]
