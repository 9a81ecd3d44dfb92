"""Elastic Ulysses SP over gloo processes: SP = 1, 2, 4 match the single-process DiT; a member lost mid-group
regroups to the largest degree dividing the heads with the checkpoint deleted (nothing from disk); a joiner
gets the weights from a peer; a member killed during a forward pass breaks the collective, and the survivors
regroup; the cold restart reloads from disk."""

import shutil
import threading

import pytest
import torch

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sp_group import ElasticSPGroup, GroupBroken

VOCAB = ["one", "red", "square", "left", "two", "blue"]
ATOL = 1e-5  # float32 attention summed in another order across ranks; outputs are O(1)


@pytest.mark.slow
def test_elastic_sp_matches_single_process_through_loss_and_join(tmp_path):
    torch.manual_seed(0)
    policy = build_policy(VOCAB, 16, 32, 2, 4, seed=0).eval()
    policy.save(tmp_path / "policy")
    x, t = torch.randn(2, 3, 16, 16), torch.tensor([0.9, 0.3])
    with torch.no_grad():
        hidden, mask = policy.encode(["one red square left", "two blue square"])
        reference = policy.velocity(x, t, (hidden, mask))
    group = ElasticSPGroup(4, tmp_path / "policy", tmp_path)
    try:
        for degree in (1, 2, 4):
            assert group.form(degree) == degree
            torch.testing.assert_close(group.forward(x, t, hidden, mask), reference, atol=ATOL, rtol=0)
        with pytest.raises(ValueError, match="SP degree 3 is not possible"):
            group.form(3)  # 3 divides neither the 4 heads nor the 64 tokens
        shutil.rmtree(tmp_path / "policy")  # from here on a reload from disk would fail
        group.form(4)
        group.lose(2)  # a member of the running group vanishes
        assert group.form() == 2  # 3 survivors: the largest degree dividing 4 heads is 2, one spare
        torch.testing.assert_close(group.forward(x, t, hidden, mask), reference, atol=ATOL, rtol=0)
        group.join(1)  # a replacement: architecture only, weights from rank 0's memory
        assert group.form(weights_from_peer=True) == 4
        torch.testing.assert_close(group.forward(x, t, hidden, mask), reference, atol=ATOL, rtol=0)
        sums = group.checksums()
        assert len(sums) == 4 and len(set(sums)) == 1  # the joiner holds the peers' weights exactly
        # a member dies *during* a forward pass: the survivors' collective fails, they report it and regroup
        big_x, big_t = x.repeat(128, 1, 1, 1), t.repeat(128)
        big_hidden, big_mask = hidden.repeat(128, 1, 1), mask.repeat(128, 1)
        killer = threading.Timer(0.05, group.group[3].process.kill)
        killer.start()
        with pytest.raises(GroupBroken):
            group.forward(big_x, big_t, big_hidden, big_mask)
        killer.join()
        assert group.form() == 2
        torch.testing.assert_close(group.forward(x, t, hidden, mask), reference, atol=ATOL, rtol=0)
        policy.save(tmp_path / "policy")
        group.cold_restart(2)
        torch.testing.assert_close(group.forward(x, t, hidden, mask), reference, atol=ATOL, rtol=0)
    finally:
        group.close()
