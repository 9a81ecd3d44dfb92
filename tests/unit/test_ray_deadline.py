"""The deadline of a polled call, and what each kind of call is bounded by (no Ray needed)."""

from __future__ import annotations

import pytest

from rollarc.config.cluster import ClusterConfig
from rollarc.diffusion.config import T2IClusterConfig
from rollarc.rayproc.deadline import ActorHung, Deadlines


def test_the_deadlines_come_from_the_cluster_section_of_either_path():
    llm = Deadlines.of(ClusterConfig(start_timeout_s=7, call_timeout_s=2, train_timeout_s=9))
    t2i = Deadlines.of(T2IClusterConfig(start_timeout_s=7, call_timeout_s=2, train_timeout_s=9))
    assert llm == t2i == Deadlines(start_s=7.0, call_s=2.0, train_s=9.0)
    assert [llm.seconds(k) for k in ("start", "call", "train")] == [7.0, 2.0, 9.0]
    assert llm.key("train") == "cluster.train_timeout_s"


def test_the_defaults_leave_a_long_training_step_room():
    defaults = Deadlines.of(ClusterConfig())
    assert (defaults.start_s, defaults.call_s, defaults.train_s) == (1800.0, 300.0, 3600.0)


def test_a_polled_call_past_its_deadline_raises_one_line_naming_the_actor_the_call_and_the_key():
    deadlines = Deadlines(start_s=60, call_s=5, train_s=10)
    deadlines.check("train", started=100.0, actor="the trainer", method="train_step of step 3", now=110.0)  # at: ok
    with pytest.raises(ActorHung) as hung:
        deadlines.check("train", started=100.0, actor="the trainer", method="train_step of step 3", now=110.5)
    assert str(hung.value) == (
        "the trainer did not answer train_step of step 3 within 10 s: it is alive but hung "
        "(if it is only slow, raise cluster.train_timeout_s)"
    )
    assert "\n" not in str(hung.value)
