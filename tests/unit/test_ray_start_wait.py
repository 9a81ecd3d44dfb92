"""A local Ray start waits longer for its GCS than Ray's 30 s default, and starts again when the GCS never comes up."""

from __future__ import annotations

import os
from typing import Any

import pytest

from rollarc.config import ClusterConfig
from rollarc.rayproc import local_start as ray_local_start
from rollarc.rayproc.local_start import gcs_start_timeout_session, init_local_ray
from rollarc.runtime import ray_cluster

CLUSTER = ClusterConfig.model_validate(
    {
        "pools": {"compute": {"count": 2, "kind": "cpu"}, "cpu": {"count": 1, "kind": "cpu"}},
        "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
    }
)
# What Ray 2.60 raised in CI when its GCS never started (the node id shortened; Ray's temp dir, an absolute
# path there, is left relative here).
SESSION = "ray/session_2026-12-01_03-49-57_305224_24038"
GCS_TIMEOUT = f"Timed out waiting for file {SESSION}/gcs_server_port_f2b83313"


class Started(Exception):
    """Stops start_ray at ray.init, with the wait Ray would have read."""


def _capture(**kwargs: object) -> None:
    raise Started(os.environ.get(ray_local_start.GCS_PORT_WAIT_ENV))


def test_a_local_start_sets_a_longer_gcs_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ray_local_start.GCS_PORT_WAIT_ENV, raising=False)
    monkeypatch.setattr(ray_cluster.ray, "init", _capture)
    with pytest.raises(Started) as seen:
        ray_cluster.start_ray(CLUSTER)
    assert seen.value.args == ("120",)


def test_the_users_own_gcs_wait_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ray_local_start.GCS_PORT_WAIT_ENV, "45")
    monkeypatch.setattr(ray_cluster.ray, "init", _capture)
    with pytest.raises(Started) as seen:
        ray_cluster.start_ray(CLUSTER)
    assert seen.value.args == ("45",)


def test_the_gcs_timeout_is_recognised_with_its_session_and_nothing_else_is() -> None:
    assert gcs_start_timeout_session(RuntimeError(GCS_TIMEOUT)) == SESSION
    assert gcs_start_timeout_session(RuntimeError(f"Timed out waiting for file {SESSION}/raylet_port_1")) is None
    assert gcs_start_timeout_session(ValueError(GCS_TIMEOUT)) is None
    assert gcs_start_timeout_session(RuntimeError("Maybe you called ray.init twice by accident?")) is None


class FlakyInit:
    """``ray.init`` whose GCS fails to start ``failures`` times, then starts; records every call's arguments."""

    def __init__(self, failures: int, error: str = GCS_TIMEOUT) -> None:
        self.failures, self.error, self.calls = failures, error, list[dict[str, Any]]()

    def __call__(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        if len(self.calls) <= self.failures:
            raise RuntimeError(self.error)
        return "context"


@pytest.fixture
def reaped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sessions: list[str] = []
    monkeypatch.setattr(ray_local_start, "reap", sessions.append)
    return sessions


def test_a_gcs_that_never_starts_is_started_again_in_a_new_session(reaped: list[str]) -> None:
    init = FlakyInit(failures=2)
    assert init_local_ray(init, num_cpus=2) == "context"
    assert init.calls == [{"address": "local", "num_cpus": 2}] * 3
    assert reaped == [SESSION] * 2


def test_the_last_attempts_error_is_raised(reaped: list[str]) -> None:
    init = FlakyInit(failures=ray_local_start.GCS_START_ATTEMPTS)
    with pytest.raises(RuntimeError, match="gcs_server_port"):
        init_local_ray(init)
    assert len(init.calls) == ray_local_start.GCS_START_ATTEMPTS
    assert len(reaped) == ray_local_start.GCS_START_ATTEMPTS - 1


def test_any_other_start_error_is_raised_at_once(reaped: list[str]) -> None:
    init = FlakyInit(failures=1, error="When connecting to an existing cluster, num_cpus must not be provided")
    with pytest.raises(RuntimeError, match="existing cluster"):
        init_local_ray(init, num_cpus=2)
    assert len(init.calls) == 1 and reaped == []
