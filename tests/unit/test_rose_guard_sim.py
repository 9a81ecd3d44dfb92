"""The SLO guard demonstrably matters: on a simulated clock (rose/guard_sim.py, fixed step costs, no wall
clock), with the SLO derived as the bench derives it (1.5 x the serving-alone p99s), co-serving without the
guard loses attainment at every load of the sweep, and with it stays within 2 points of serving alone while
still running rollout decodes."""

from __future__ import annotations

from rollarc.config.harvest import SLOConfig
from rollarc.rose.guard import largest_batch
from rollarc.rose.guard_sim import CoServingSim, LinearCost
from rollarc.rose.latency_model import StepShape
from rollarc.rose.slo import summarize
from rollarc.rose.trace import scale, synthetic_trace

SERVING = LinearCost(base=0.004, per_decode=0.001, per_prefill=0.00005)
ROLLOUT = LinearCost(base=0.003, per_decode=0.0015, per_prefill=0.0, per_context=0.000002)
UNBOUNDED = SLOConfig(ttft_p99_ms=1e9, tpot_p99_ms=1e9)


def test_without_the_guard_attainment_falls_below_serving_alone() -> None:
    base = scale(synthetic_trace(30.0, 2.0, seed=3), 1.0, 1 / 16, max_prompt_tokens=256, max_output_tokens=32)
    alone = summarize(CoServingSim(SERVING, ROLLOUT, UNBOUNDED, rollout_batch=0).run(base).timings, UNBOUNDED)
    slo = SLOConfig(ttft_p99_ms=1.5 * alone["ttft_p99_ms"], tpot_p99_ms=1.5 * alone["tpot_p99_ms"])
    rows = []
    for time_scale in (1.0, 2.0, 4.0):
        trace = scale(base, time_scale)
        alone_run = CoServingSim(SERVING, ROLLOUT, slo, rollout_batch=0).run(trace)
        guarded = CoServingSim(SERVING, ROLLOUT, slo, rollout_batch=16).run(trace)
        unguarded = CoServingSim(SERVING, ROLLOUT, slo, rollout_batch=16, guard=False).run(trace)
        assert len(alone_run.timings) == len(guarded.timings) == len(unguarded.timings) == len(trace)
        rows.append(
            (
                summarize(alone_run.timings, slo)["slo_attainment"],
                summarize(guarded.timings, slo)["slo_attainment"],
                summarize(unguarded.timings, slo)["slo_attainment"],
                guarded.pauses,
                guarded.rollout_tokens,
                unguarded.rollout_tokens,
            )
        )
    for alone_att, guarded_att, unguarded_att, pauses, guarded_tokens, unguarded_tokens in rows:
        assert alone_att >= 0.97  # 1.5 x its own p99: serving alone mostly meets it
        # close to alone, not equal: the guard budgets one arrival of the longest prompt seen so far, so two
        # that arrive during one rollout step, with more prompt tokens together, can still miss (1 of the 62
        # requests at two of the loads here; budgeting the busiest past burst instead missed the same ones)
        assert alone_att - 0.02 <= guarded_att <= alone_att
        assert unguarded_att < alone_att - 0.5  # without it, rollout steps break most requests' SLO
        assert pauses > 0 and 0 < guarded_tokens < unguarded_tokens  # the guard acts, and still lends some time


def test_largest_batch_stops_at_the_first_refusal() -> None:
    """The one batch-sizing rule of the executor's headroom and of the simulation: 2 ms a decode in a 7 ms budget."""
    shapes: list[StepShape] = []

    def fits(step: StepShape) -> bool:
        shapes.append(step)
        return 0.002 * step.decodes <= 0.007

    assert largest_batch(8, lambda b: StepShape(b, 0, 10 * b), fits) == 3
    assert shapes == [StepShape(b, 0, 10 * b) for b in (1, 2, 3, 4)]  # asked up to the first refusal, no further
    assert largest_batch(2, lambda b: StepShape(b), fits) == 2  # bounded by the limit
    assert largest_batch(8, lambda b: StepShape(b), lambda step: step.decodes != 1) == 0  # a pause, not 2..8
