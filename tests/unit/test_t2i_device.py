"""Where the t2i path computes (rollarc.diffusion.t2i_device): the SP transport, the GPUs a role reserves, the
start-up check of model.device, and the CPU-staged Ulysses exchanges that members sharing one GPU use."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from rollarc.config.io import ConfigError
from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.t2i_device import SPTransport, device_problem, role_gpus, sp_transport
from rollarc.runtime.t2i_entry import check_device_here, role_options
from tests.unit.ulysses_ranks import staged_rank


def test_sp_transport_is_nccl_only_when_each_member_has_a_gpu_of_its_own():
    assert sp_transport("cpu", 0.0) == SPTransport("gloo", staged=False)
    assert sp_transport("cuda", 1.0) == SPTransport("nccl", staged=False)
    assert sp_transport("cuda", 2.0) == SPTransport("nccl", staged=False)
    assert sp_transport("cuda", 0.5) == SPTransport("gloo", staged=True)  # NCCL refuses two ranks on one GPU
    with pytest.raises(ValueError, match="'mps'"):
        sp_transport("mps", 1.0)


def test_role_gpus_follow_the_llm_paths_rule():
    assert role_gpus("cpu", gpu_pool=True, units=1.0, joined=True, cluster_gpus=8) == 0.0
    assert role_gpus("cuda", gpu_pool=True, units=0.5, joined=False, cluster_gpus=1) == 0.5
    assert role_gpus("auto", gpu_pool=True, units=1.0, joined=False, cluster_gpus=0) == 0.0  # a laptop
    assert role_gpus("auto", gpu_pool=True, units=2.0, joined=True, cluster_gpus=0) == 2.0  # real resources
    assert role_gpus("cuda", gpu_pool=False, units=1.0, joined=False, cluster_gpus=1) == 0.0
    assert role_gpus("cuda", gpu_pool=True, units=0.0, joined=False, cluster_gpus=1) == 0.0


def test_device_problem_names_the_key_and_the_fix():
    gpu_pools = {"trainer": ("compute", True), "sampler": ("compute", True)}
    assert device_problem("cpu", False, False, {"trainer": ("compute", False)}, False) is None
    assert device_problem("auto", False, False, {"trainer": ("compute", False)}, True) is None
    assert device_problem("cuda", False, True, gpu_pools, False) is None
    assert device_problem("cuda", True, False, gpu_pools, False) is None  # a joined cluster's GPUs: checked at start
    no_gpu = device_problem("cuda", False, False, gpu_pools, False)
    assert no_gpu is not None and "model.device" in no_gpu and "model.device=cpu" in no_gpu
    cpu_pool = device_problem("cuda", False, True, {"trainer": ("compute", True), "sampler": ("cheap", False)}, False)
    assert cpu_pool is not None and "sampler on 'cheap'" in cpu_pool and "cluster.pools.<name>.kind" in cpu_pool
    spot = device_problem("cuda", False, True, gpu_pools, True)
    assert spot is not None and "spot.enabled" in spot and "model.device=auto" in spot


def test_cuda_is_refused_before_anything_starts_in_one_line():
    cfg = T2IConfig.model_validate({"kind": "t2i", "model": {"device": "cuda"}})
    with pytest.raises(ConfigError) as err:
        check_device_here(cfg)
    assert "model.device is 'cuda'" in str(err.value) and "\n" not in str(err.value)
    check_device_here(T2IConfig.model_validate({"kind": "t2i"}))  # cpu, the default: nothing to refuse


def test_cpu_roles_reserve_no_gpu():
    cfg = T2IConfig.model_validate({"kind": "t2i"})
    options = role_options(cfg.cluster, "sampler", cfg.model.device)
    assert "num_gpus" not in options and options["resources"] == {"pool_compute": 1.0}


@pytest.mark.slow  # two processes that import torch and diffusers
def test_staged_exchanges_give_the_plain_ones_result(tmp_path: Path):
    """Degree 2 over gloo: the CPU-staged all-to-alls and all-gather equal the direct ones bitwise, and both
    the full-sequence forward (to float tolerance: attention is split over heads)."""
    out = tmp_path / "out.pt"
    mp.spawn(staged_rank, args=(str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    got = torch.load(out, weights_only=True)
    assert torch.equal(got["staged"], got["plain"])
    torch.testing.assert_close(got["plain"], got["reference"], rtol=1e-4, atol=1e-5)
