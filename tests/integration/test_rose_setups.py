"""ROSE's three set-ups on the training path's actors (``rollarc.runtime.rose_setup``) on a local Ray cluster: the
co-serving replica replays a short synthetic trace while multi-turn rollouts go through the Router to the dedicated
RolloutWorker and, in ``harvest``, to the co-serving replica the HarvestPool lends (nano models).

``rose_cluster`` starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): the
set-ups pin their actors and this driver to cores (``serving_cores``, ``rollout_cores``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollarc.rose.config import RoseConfig
from rollarc.rose.trace import scale, synthetic_trace
from rollarc.runtime.rose_setup import PolicySpec, RolloutShape, rose_cluster, run_setup, write_policy

pytestmark = pytest.mark.slow

# An SLO no serving step misses, and lending at once: the replica is lent as soon as it reports headroom, so the
# harvest set-up must route turns to it.
ROSE = RoseConfig.model_validate(
    {
        "slo": {"ttft_p99_ms": 5000.0, "tpot_p99_ms": 1000.0},
        "serving": {"preset": "nano", "max_model_len": 256, "max_num_seqs": 16},
        "replay": {"duration_s": 4.0},
        "lend_after_s": 0.0,
        "dedicated_first": False,
    }
)
POLICY = PolicySpec(preset="nano", max_model_len=256, max_num_seqs=4, prefix_cache_tokens=1024)
SHAPE = RolloutShape(turns=2, prompt_tokens=16, gen_tokens=4, obs_tokens=4, in_flight=8)


def test_three_setups_serve_every_request_and_harvest_borrows(tmp_path: Path) -> None:
    trace = scale(synthetic_trace(4.0, 4.0, seed=1), token_scale=1 / 32, max_output_tokens=8)
    with rose_cluster():
        policy_dir, vocab = write_policy(POLICY, tmp_path)
        runs = {
            mode: run_setup(
                mode, ROSE, trace, policy_dir=policy_dir, vocab_size=vocab, policy=POLICY, shape=SHAPE, timeout_s=300
            )
            for mode in ("alone", "dedicated", "harvest")
        }
    for mode, result in runs.items():
        # every serving request admitted and finished, with the trace's lengths
        assert [t.output_tokens for t in result.timings] == [r.output_tokens for r in trace], mode
        assert result.counters["served"] >= len(trace), mode
        assert {"pauses", "preemptions"} <= set(result.counters), mode
        assert {"lends", "withdrawals", "migrated_turns"} <= set(result.lending), mode
        assert result.turn_versions_ok, mode
        assert result.window_s > 0, mode
    alone, dedicated, harvest = runs["alone"], runs["dedicated"], runs["harvest"]
    assert alone.turns == 0 and alone.routed == {} and alone.lending["lends"] == 0
    assert dedicated.turns > 0 and set(dedicated.routed) == {"dedicated"} and dedicated.lending["lends"] == 0
    assert dedicated.counters["turns_done"] == 0  # never lent: the co-serving replica ran no rollout turn
    assert harvest.lending["lends"] >= 1
    assert harvest.routed["borrowed"] > 0  # turns finished on the borrowed replica, through the Router
    assert harvest.counters["turns_done"] > 0  # the replica's own count of the rollout turns it finished
    assert harvest.turns <= sum(harvest.routed.values())
    # the rollout time each serving request saw on its worker: none where nothing was lent, and what is counted in
    # the harvest run never exceeds the request's own life
    assert all(t.rollout_before_first_s == t.rollout_after_first_s == 0.0 for t in alone.timings + dedicated.timings)
    assert any(t.rollout_before_first_s + t.rollout_after_first_s > 0.0 for t in harvest.timings)
    for t in alone.timings + dedicated.timings + harvest.timings:
        rollout = t.rollout_before_first_s + t.rollout_after_first_s
        serving = t.serving_before_first_s + t.serving_after_first_s
        assert serving > 0.0 and rollout + serving <= t.finish_s - t.arrival_s + 1e-9
