"""Elastic Ulysses SP across Ray actors, each on its own node of a local multi-node cluster: degree 3 matches the
single-process DiT; removing one member's node leaves 2 survivors that regroup with the checkpoint deleted and no
disk load (bitwise-same weights); a joiner on a new node gets the weights from a peer bitwise; a member killed
during a forward pass breaks the collective and the survivors regroup; the warm restart reloads from disk.

It starts a Ray cluster of its own (``ray.cluster_utils.Cluster``), not the suite's shared one
(tests/integration/shared_ray.py): it adds a Ray node per SP member and removes one (a reclaimed node)."""

import shutil
import threading

import pytest
import ray
import torch
from ray.cluster_utils import Cluster

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sp_group import ElasticSPGroup, GroupBroken

VOCAB = ["one", "red", "square", "left", "two", "blue"]
# float32 attention over a different split of the heads and tokens (3 vs 2 ranks) can sum in another order;
# outputs are O(1)
ATOL = 1e-5


def member_node(n: int) -> str:
    return f"sp_node_{n}"


@pytest.mark.slow
def test_members_on_separate_nodes_regroup_without_disk_after_a_node_loss(tmp_path):
    # 6 heads and (12 / 2)^2 = 36 tokens: degrees 3 and 2 both divide them
    policy = build_policy(VOCAB, 12, 24, 1, 6, seed=0).eval()
    policy.save(tmp_path / "policy")
    x, t = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(0)), torch.tensor([0.9, 0.3])
    with torch.no_grad():
        hidden, mask = policy.encode(["one red square left", "two blue square"])
        reference = policy.velocity(x, t, (hidden, mask))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = {n: cluster.add_node(num_cpus=0, resources={member_node(n): 1}) for n in range(3)}
    ray.init(address=cluster.address)
    group = None
    try:
        group = ElasticSPGroup(3, tmp_path / "policy", place=lambda n: {"resources": {member_node(n): 1}})
        assert group.form() == 3
        ids = group.node_ids()
        assert ids == [str(nodes[n].node_id) for n in range(3)]  # each member on its own node
        before = group.forward(x, t, hidden, mask)
        torch.testing.assert_close(before, reference, atol=ATOL, rtol=0)
        digests = group.digests()
        assert group.disk_loads() == 3 and len(set(digests)) == 1

        shutil.rmtree(tmp_path / "policy")  # from here on a reload from disk would fail
        cluster.remove_node(nodes[2], allow_graceful=False)  # member 2's node is reclaimed
        group.wait_for_loss(2, timeout_s=60)
        assert group.form() == 2  # the two survivors, a group again
        assert group.node_ids() == ids[:2]
        assert group.digests() == digests[:2]  # their weights, bitwise, never left memory
        assert group.disk_loads() == 2  # one load each, at their start: none since
        # bitwise: every op is per token or per head, and float32 on this CPU gives the same bits for a shard of
        # 12 or 18 tokens and 2 or 3 heads (checked against the single-process DiT above only within ATOL)
        assert torch.equal(group.forward(x, t, hidden, mask), before)

        nodes[3] = cluster.add_node(num_cpus=0, resources={member_node(3): 1})
        group.join(1)  # a replacement on a new node: architecture only, weights from rank 0's memory
        assert group.form(weights_from_peer=True) == 3
        assert group.digests() == digests  # the joiner holds the peers' weights exactly
        assert group.disk_loads() == 2
        assert torch.equal(group.forward(x, t, hidden, mask), before)

        # a member dies *during* a forward pass: the survivors' collective fails, they report it and regroup
        big = [a.repeat(256, *[1] * (a.dim() - 1)) for a in (x, t, hidden, mask)]
        killer = threading.Timer(0.05, ray.kill, args=(group.group[2].actor,))
        killer.start()
        with pytest.raises(GroupBroken):
            group.forward(*big)
        killer.join()
        assert group.form() == 2
        torch.testing.assert_close(group.forward(x, t, hidden, mask), before, atol=ATOL, rtol=0)

        policy.save(tmp_path / "policy")  # the warm restart reads the checkpoint: once per member
        assert group.warm_restart() == 2
        assert group.disk_loads() == 4
        torch.testing.assert_close(group.forward(x, t, hidden, mask), before, atol=ATOL, rtol=0)
    finally:
        if group is not None:
            group.close()
        ray.shutdown()
        cluster.shutdown()
