"""A t2i run on a cluster it joins (issue 44, item 2): what is refused, and how Ray is joined; no Ray started."""

import pytest

from rollarc.config.io import ConfigError
from rollarc.diffusion.config import load_t2i_config
from rollarc.runtime.t2i_entry import check_joinable, ray_start, train_t2i_main

ADDRESS = "10.0.0.1:6379"


def test_injected_preemptions_on_a_joined_cluster_are_refused_before_ray_starts():
    with pytest.raises(ConfigError, match=r"spot\.trace=null and spot\.rate_per_hour=0") as err:
        train_t2i_main("configs/t2i_spot.yaml", [], address=ADDRESS)  # its trace preempts nodes rollarc starts
    assert ADDRESS in str(err.value) and "\n" not in str(err.value)
    rate_only = load_t2i_config("configs/t2i_spot.yaml", ["spot.trace=null", f"cluster.address={ADDRESS}"])
    with pytest.raises(ConfigError, match="rate_per_hour"):
        check_joinable(rate_only)  # the default rate, 60 per node-hour, is an injector too


def test_without_injection_a_joined_cluster_is_accepted_and_a_local_one_keeps_its_injector():
    check_joinable(load_t2i_config("configs/t2i_spot_cluster.yaml", [f"cluster.address={ADDRESS}"]))
    check_joinable(load_t2i_config("configs/t2i_spot.yaml", []))  # local: the trace is the injector's


def test_joining_passes_the_address_and_leaves_the_spot_pool_to_the_fleet():
    joined = ray_start(load_t2i_config("configs/t2i_spot_cluster.yaml", [f"cluster.address={ADDRESS}"]))
    assert (joined.address, joined.joining_pools, dict(joined.head_resources)) == (ADDRESS, ("spot",), {})
    local = ray_start(load_t2i_config("configs/t2i_spot.yaml", []))
    assert (local.address, local.joining_pools, dict(local.head_resources)) == (None, ("spot",), {"spot_head": 1.0})
