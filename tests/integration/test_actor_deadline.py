"""A call to a hung actor (alive, not answering) ends within its deadline with one line naming the actor.

Before ``rollarc.rayproc.deadline`` these waits were bare ``ray.get`` calls, which wait forever for such an actor.

It starts a tiny Ray cluster of its own (``start_ray`` without ``cluster.address``), not the suite's shared one
(tests/integration/shared_ray.py): one start for the module's four tests, whose actors need no pool, and the worker
it freezes with SIGSTOP and then kills stays off the cluster other runs share.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import ray

from rollarc.config.cluster import ClusterConfig
from rollarc.rayproc.deadline import ActorHung, Deadlines
from rollarc.runtime.ray_cluster import start_ray, stop_ray

pytestmark = pytest.mark.slow

DEADLINES = Deadlines(start_s=60.0, call_s=1.5, train_s=60.0)


@ray.remote(num_cpus=0)
class Sleeper:
    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def pid(self) -> int:
        return os.getpid()

    def ask(self, other: object) -> float:
        """Waits on ``other``'s hung call as FSDP rank 0 waits on a peer: its ``ActorHung`` travels back."""
        return DEADLINES.get("call", other.nap.remote(30.0), "the peer", "nap")  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    start_ray(ClusterConfig(num_cpus=2))
    yield
    stop_ray()


def test_an_answer_within_the_deadline_is_returned(ray_cluster):
    sleeper = Sleeper.remote()  # type: ignore[attr-defined]
    assert DEADLINES.get("start", sleeper.nap.remote(0.0), "the sleeper", "nap") == 0.0


def test_a_call_that_outlives_its_deadline_raises_one_line_naming_the_actor_and_method(ray_cluster):
    sleeper = Sleeper.remote()  # type: ignore[attr-defined]
    DEADLINES.get("start", sleeper.nap.remote(0.0), "the sleeper", "nap")
    with pytest.raises(ActorHung) as hung:
        DEADLINES.get("call", sleeper.nap.remote(30.0), "the sleeper", "nap")
    assert str(hung.value) == (
        "the sleeper did not answer nap within 1.5 s: it is alive but hung "
        "(if it is only slow, raise cluster.call_timeout_s)"
    )
    ray.kill(sleeper)


def test_a_stopped_process_is_a_hung_actor_and_only_the_hung_one_is_named(ray_cluster):
    awake, stopped = Sleeper.remote(), Sleeper.remote()  # type: ignore[attr-defined]
    pid = DEADLINES.get("start", stopped.pid.remote(), "stopped", "pid")
    DEADLINES.get("start", awake.pid.remote(), "awake", "pid")
    os.kill(pid, signal.SIGSTOP)  # alive (no RayActorError) but it answers nothing
    try:
        with pytest.raises(ActorHung) as hung:
            DEADLINES.get_each("call", {"awake": awake.nap.remote(0.0), "stopped": stopped.nap.remote(0.0)}, "nap")
        assert str(hung.value).startswith("stopped did not answer nap within 1.5 s: it is alive but hung")
    finally:
        os.kill(pid, signal.SIGKILL)


def test_an_actor_that_found_a_hung_peer_reports_it_as_one_line(ray_cluster):
    lead, peer = Sleeper.remote(), Sleeper.remote()  # type: ignore[attr-defined]
    with pytest.raises(ActorHung) as hung:
        DEADLINES.get("train", lead.ask.remote(peer), "the lead", "ask")
    assert str(hung.value) == (
        "the peer did not answer nap within 1.5 s: it is alive but hung "
        "(if it is only slow, raise cluster.call_timeout_s)"
    )
