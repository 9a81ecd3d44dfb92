"""The sampler's call path with SP: ``sample_sde`` and ``sample_ode`` through an SPPolicy of degree 2 give the
single-process samples within float tolerance, also after a new weight version, a shrink (a member's notice)
and a grow (a joiner with weights from a peer), with the checkpoint deleted so nothing is read from disk."""

import shutil

import pytest
import ray
import torch

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sampling import sample_ode, sample_sde
from rollarc.diffusion.sp_policy import SPPolicy
from tests.integration import shared_ray

VOCAB = ["one", "red", "square", "left", "two", "blue"]
PROMPTS = ["one red square left", "two blue square", "one blue square", "two red square left"]
SEEDS = [3, 4, 5, 6]
ATOL = 1e-4  # float32 attention summed in another order across ranks, through 4 SDE steps; samples are O(1)


def assert_same_samples(sp: SPPolicy, reference) -> None:
    a = sample_sde(sp, PROMPTS, SEEDS, 4, 0.7, 0)
    b = sample_sde(reference, PROMPTS, SEEDS, 4, 0.7, 0)
    torch.testing.assert_close(a.states, b.states, atol=ATOL, rtol=0)
    torch.testing.assert_close(a.logps, b.logps, atol=ATOL * 100, rtol=1e-4)  # a sum over 768 pixels


@pytest.mark.slow
def test_sp_sampling_matches_single_process_through_new_weights_shrink_and_grow(tmp_path):
    torch.set_num_threads(1)
    policy = build_policy(VOCAB, 16, 16, 1, 2, seed=0).eval()
    policy.save(tmp_path / "policy")
    reference = build_policy(VOCAB, 16, 16, 1, 2, seed=0).eval()
    ray.init(address=shared_ray.address())  # the SP members are Ray actors (the suite's shared cluster)
    sp = SPPolicy(build_policy(VOCAB, 16, 16, 1, 2, seed=0).eval(), tmp_path / "policy", 2, 1)
    try:
        assert sp.degree == 2
        with torch.no_grad():  # the caller's own DiT copy zeroed: samples can only come from the SP members
            for p in sp.transformer.parameters():
                p.zero_()
        assert_same_samples(sp, reference)
        ode = sample_ode(sp, PROMPTS, SEEDS, 3)
        assert abs(ode - sample_ode(reference, PROMPTS, SEEDS, 3)).max() < ATOL
        shutil.rmtree(tmp_path / "policy")  # from here on a reload from disk would fail
        torch.manual_seed(1)
        new = {k: v + 0.05 * torch.randn_like(v) for k, v in reference.transformer.state_dict().items()}
        reference.transformer.load_state_dict(new)
        sp.set_weights(new)  # a new version: the local copy and every member
        assert_same_samples(sp, reference)
        sp.shrink()  # a member's device is reclaimed: one survivor, SP degree 1
        assert (sp.degree, sp.regroups) == (1, 1)
        assert_same_samples(sp, reference)
        sp.grow()  # a device joins: architecture only, weights from the survivor
        assert sp.counters() == {"sp_degree": 2, "sp_regroups": 1, "sp_joins": 1}
        assert_same_samples(sp, reference)
        sums = sp.group.digests()
        assert len(sums) == 2 and sums[0] == sums[1]
        assert sp.group.disk_loads() == 1  # the survivor's own load at the start; the joiner's came from it
    finally:
        sp.close()
        ray.shutdown()
