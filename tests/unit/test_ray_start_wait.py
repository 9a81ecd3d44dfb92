"""A local Ray start waits longer for its GCS than Ray's 30 s default, unless the user set the wait."""

from __future__ import annotations

import os

import pytest

from rollarc.config import ClusterConfig
from rollarc.runtime import ray_cluster

CLUSTER = ClusterConfig.model_validate(
    {
        "pools": {"compute": {"count": 2, "kind": "cpu"}, "cpu": {"count": 1, "kind": "cpu"}},
        "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
    }
)


class Started(Exception):
    """Stops start_ray at ray.init, with the wait Ray would have read."""


def _capture(**kwargs: object) -> None:
    raise Started(os.environ.get(ray_cluster.GCS_PORT_WAIT_ENV))


def test_a_local_start_sets_a_longer_gcs_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ray_cluster.GCS_PORT_WAIT_ENV, raising=False)
    monkeypatch.setattr(ray_cluster.ray, "init", _capture)
    with pytest.raises(Started) as seen:
        ray_cluster.start_ray(CLUSTER)
    assert seen.value.args == ("120",)


def test_the_users_own_gcs_wait_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ray_cluster.GCS_PORT_WAIT_ENV, "45")
    monkeypatch.setattr(ray_cluster.ray, "init", _capture)
    with pytest.raises(Started) as seen:
        ray_cluster.start_ray(CLUSTER)
    assert seen.value.args == ("45",)
