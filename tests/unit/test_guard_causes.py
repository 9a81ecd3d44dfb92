"""The co-serving executor counts why rollout was held back: the guard's SLO refusals and preemptions apart from
turns blocked by memory or by free slots before the guard is asked (rollarc.rose.guard_actions).

Two nano engines on a fake clock with hand-set latency models (tests/unit/test_rose_coserve.py): every decision is
deterministic. The guard's budget is 0.8 x 20 ms = 16 ms of TPOT; a serving decode costs 4 ms, a rollout decode 2.
"""

from __future__ import annotations

from collections import Counter

import pytest

from rollarc.config.harvest import SLOConfig
from rollarc.engine.types import SamplingParams
from rollarc.rose.guard_actions import GUARD_ACTIONS, guard_actions
from rollarc.runtime.harvest_pool import counted
from tests.unit.test_rose_coserve import _executor, _serve, _turns

CAUSES = ("paused_for_slo", "paused_for_memory", "paused_for_slots", "preempted_for_slo", "preempted_for_memory")


def causes(counters: dict[str, int]) -> dict[str, int]:
    return {key: counters[key] for key in ("pauses", "preemptions", *CAUSES)}


def test_a_turn_that_does_not_fit_beside_serving_is_a_memory_pause_not_the_guards() -> None:
    ex = _executor(memory_tokens=40)
    _serve(ex, 3, max_tokens=10)  # serving reserves 3 x (4 + 10) = 42 > 40: no room for any turn
    (turn,) = _turns(1)  # 5 + 6 = 11 tokens
    ex.submit_turn(turn)
    ex.poll()
    ex.poll()  # the same pause: counted once
    assert causes(ex.counters) == {
        "pauses": 1,
        "preemptions": 0,
        "paused_for_slo": 0,
        "paused_for_memory": 1,
        "paused_for_slots": 0,
        "preempted_for_slo": 0,
        "preempted_for_memory": 0,
    }
    assert (
        ex.counters["refused_tpot"] == ex.counters["refused_ttft_waiting"] == ex.counters["refused_ttft_arrival"] == 0
    )


def test_a_turn_with_no_free_slot_in_the_rollout_engine_is_a_slot_pause() -> None:
    ex = _executor()
    params = SamplingParams(temperature=0.0, max_tokens=2)
    for i in range(ex.rollout.kv.max_num_seqs):  # every sequence slot of R taken by requests not the executor's
        ex.rollout.add_request([1, 2, 3], params, request_id=f"other{i}")
    (turn,) = _turns(1)
    ex.submit_turn(turn)
    ex.poll()  # serving idle: only the slots hold the turn back
    assert ex.counters["pauses"] == 1 and ex.counters["paused_for_slots"] == 1
    assert ex.counters["paused_for_slo"] == ex.counters["paused_for_memory"] == 0


def test_a_step_the_guard_refuses_is_an_slo_pause_and_a_change_of_cause_a_new_pause() -> None:
    ex = _executor(memory_tokens=60)
    _serve(ex, 4, max_tokens=8)
    ex.poll()  # serving prefills its 4 requests: they decode from now on
    (turn,) = _turns(1)  # 11 tokens: 4 x 12 = 48 reserved by serving, 48 + 11 <= 60 fits
    ex.submit_turn(turn)
    ex.poll()  # 4 serving decodes 16 ms + 1 rollout decode 2 ms > 16 ms: the guard refuses (TPOT)
    assert ex.counters["pauses"] == 1 and ex.counters["paused_for_slo"] == 1 and ex.counters["refused_tpot"] == 1
    assert ex.counters["paused_for_memory"] == ex.counters["paused_for_slots"] == 0
    _serve(ex, 1, max_tokens=8, start=4)  # one more serving request: 5 x 12 = 60, no room for the turn any more
    ex.poll()
    assert ex.counters["pauses"] == 2 and ex.counters["paused_for_memory"] == 1 and ex.counters["paused_for_slo"] == 1


def test_preemptions_are_split_into_the_guards_and_memorys() -> None:
    slo = _executor()
    turns = _turns(3, max_tokens=8)
    for t in turns:
        slo.submit_turn(t)
    slo.poll()  # 3 running turns
    _serve(slo, 3, max_tokens=8)  # 3 serving decodes 12 ms: 3 rollout decodes (6 ms) refused, 2 (4 ms) admitted
    slo.poll()
    assert causes(slo.counters) == {
        "pauses": 0,
        "preemptions": 1,
        "paused_for_slo": 0,
        "paused_for_memory": 0,
        "paused_for_slots": 0,
        "preempted_for_slo": 1,
        "preempted_for_memory": 0,
    }

    memory = _executor(memory_tokens=40)
    (turn,) = _turns(1, max_tokens=10)  # 15 tokens
    memory.submit_turn(turn)
    memory.poll()
    _serve(memory, 2, max_tokens=10)  # serving reserves 28: 28 + 15 > 40, the running turn is preempted
    memory.poll()
    assert memory.counters["preemptions"] == memory.counters["preempted_for_memory"] == 1
    assert memory.counters["preempted_for_slo"] == 0


def test_guard_actions_map_the_counters_summed_over_replicas_to_the_six_causes() -> None:
    a = {"counters": {"paused_for_slo": 3, "preempted_for_slo": 1, "paused_for_memory": 2, "preempted_for_memory": 4}}
    b = {"counters": {"paused_for_slo": 1, "paused_for_slots": 5, "pauses": 99, "preemptions": 99}}
    total: Counter[str] = counted(a) + counted(b)
    assert guard_actions(total, withdrawals=7) == {
        "slo_pauses": 4,
        "slo_preemptions": 1,
        "withdrawals": 7,
        "memory_pauses": 2,
        "slot_pauses": 5,
        "memory_preemptions": 4,
    }
    assert tuple(guard_actions(Counter(), 0)) == GUARD_ACTIONS
    assert set(guard_actions(Counter(), 0).values()) == {0}


def test_an_executor_whose_slo_is_being_measured_lends_nothing_and_takes_no_turn() -> None:
    ex = _executor()
    ex.slo = None  # a co-serving replica before the run's SLO is pushed (it is calibrating)
    assert ex.capacity() == 0
    with pytest.raises(ValueError, match="has no SLO yet"):
        ex.submit_turn(_turns(1)[0])
    ex.slo = SLOConfig(ttft_p99_ms=1000.0, tpot_p99_ms=20.0)  # pushed: idle serving, everything may be lent
    assert ex.capacity(limit=4) == 4
