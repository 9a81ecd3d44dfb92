"""`cluster.cores` pins the local cluster rollarc starts: refused beside `cluster.address`, and a core the machine
lacks is a one-line error before Ray starts (docs/rose.md#pinned-cores)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollarc.config.cluster import ClusterConfig
from rollarc.rose.pinning import available_cores, machine_cores, missing_cores
from rollarc.runtime.ray_cluster import ClusterResourceError, start_ray


def test_cores_are_refused_when_joining_a_cluster():
    with pytest.raises(ValidationError, match=r"cluster\.cores pins the local cluster"):
        ClusterConfig(cores=[0], address="127.0.0.1:6379")
    assert ClusterConfig(cores=[0]).cores == [0]


def test_missing_cores_names_the_key_and_the_cores_the_machine_lacks():
    n = len(machine_cores())
    assert missing_cores([0], "harvest.cores") is None
    assert missing_cores([0, n, -1], "harvest.cores") == (
        f"harvest.cores [0, {n}, -1]: this machine has no core [-1, {n}] (it has {machine_cores()})"
    )


def test_a_core_the_machine_lacks_stops_before_ray_starts_and_pins_nothing():
    before = available_cores()
    missing = len(machine_cores())
    with pytest.raises(ClusterResourceError, match=rf"this machine has no core \[{missing}\]"):
        start_ray(ClusterConfig(cores=[0, missing]))
    assert available_cores() == before
