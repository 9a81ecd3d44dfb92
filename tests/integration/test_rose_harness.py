"""ROSE end to end on pinned worker processes: a serving worker replays a synthetic trace while multi-turn
rollouts run on the dedicated worker and, when the guard allows, on the serving worker (nano models)."""

from __future__ import annotations

import pytest

from rollarc.rose.config import RoseConfig
from rollarc.rose.harness import RolloutShape, run_setup
from rollarc.rose.trace import scale, synthetic_trace
from rollarc.rose.workers import PolicySpec

pytestmark = pytest.mark.slow


def test_harvest_setup_serves_every_request_and_keeps_turn_versions() -> None:
    rose = RoseConfig.model_validate(
        {
            "slo": {"ttft_p99_ms": 5000.0, "tpot_p99_ms": 1000.0},
            "serving": {"preset": "nano", "max_model_len": 256, "max_num_seqs": 16},
        }
    )
    trace = scale(synthetic_trace(3.0, 4.0, seed=1), token_scale=1 / 32, max_output_tokens=8)
    policy = PolicySpec(preset="nano", max_model_len=256, max_num_seqs=4)
    shape = RolloutShape(turns=2, prompt_tokens=16, gen_tokens=4, obs_tokens=4, in_flight=8)
    result = run_setup("harvest", rose, trace, policy=policy, shape=shape, timeout_s=300)
    assert len(result.timings) == len(trace)  # every serving request admitted and finished
    ordered = sorted(result.timings, key=lambda t: t.arrival_s)
    assert [t.output_tokens for t in ordered] == [r.output_tokens for r in trace]
    assert result.turn_versions_ok
    done = result.counters["serve"]["turns_done"] + result.counters["ded"]["turns_done"]
    assert result.counters["ded"]["turns_done"] > 0
    assert result.trajectories * shape.turns <= done <= result.scheduler["dispatched"]
    assert result.pinned["serve"] != result.pinned["ded"] or result.pinned["serve"] == []
