"""Timed engine steps, and the calibration that fits a step-latency model before any work arrives.

Apart from the co-serving executor (:mod:`rollarc.rose.coserve`) because it is about one engine and one
model, not about sharing a worker: the executor times every step it runs with :func:`timed_step` and
calibrates each of its engines with :func:`calibrate_model`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import Completion, SamplingParams
from rollarc.rose.latency_model import StepLatencyModel, StepShape

CALIBRATION_PROMPT = 8  # prompt tokens of each request of a calibration decode batch
CALIBRATION_TOKENS = 4  # tokens each calibration request generates: one prefill step, then decode steps
CALIBRATION_REPEATS = 2  # runs of each calibration shape; each step is fed at its fastest


class TimedStep(NamedTuple):
    finished: list[Completion]
    shape: StepShape
    start: float  # the clock when the step began: its span is exactly [start, start + elapsed]
    elapsed: float


def timed_step(engine: LLMEngine, clock: Callable[[], float]) -> TimedStep:
    """One engine step: what finished, the step's shape, when it began and its measured time (for a latency
    model and for the spans that say what ran during a request's life)."""
    scheduler = engine.scheduler
    decodes, context = len(scheduler.running), sum(r.num_tokens for r in scheduler.running)
    prefilled = engine.counters["prefill_tokens"]
    start = clock()
    finished = engine.step()
    elapsed = clock() - start
    return TimedStep(
        finished, StepShape(decodes, engine.counters["prefill_tokens"] - prefilled, context), start, elapsed
    )


def calibrate_model(engine: LLMEngine, model: StepLatencyModel, prompt_tokens: int, clock: Callable[[], float]) -> int:
    """Fit ``model`` from steps of ``engine`` run now; returns the steps measured.

    Each shape runs ``CALIBRATION_REPEATS`` times and each of its steps is fed at its fastest: noise (another
    process took the core) only adds time, and an over-prediction never corrects itself, since the guard then
    admits no rollout step to learn from (an under-prediction is corrected by the first steps admitted)."""
    longest = max(1, min(prompt_tokens, engine.max_model_len - CALIBRATION_TOKENS))
    shapes = [(1, max(1, longest // 4)), (1, max(1, longest // 2)), (1, longest)]
    batch = 2
    while batch <= engine.kv.max_num_seqs:
        shapes.append((batch, CALIBRATION_PROMPT))
        batch *= 2
    params = SamplingParams(temperature=0.0, max_tokens=CALIBRATION_TOKENS, ignore_eos=True)
    steps = 0
    for n, (batch, length) in enumerate(shapes):
        runs = []
        for repeat in range(CALIBRATION_REPEATS):
            for i in range(batch):
                prompt = [1 + (i + k) % 7 for k in range(length)]
                engine.add_request(prompt, params, request_id=f"calibrate{n}.{repeat}.{i}")
            run = []
            while engine.has_unfinished():
                step = timed_step(engine, clock)
                run.append((step.shape, step.elapsed))
            runs.append(run)
            steps += len(run)
        for same in zip(*runs, strict=False):
            if all(shape == same[0][0] for shape, _ in same):
                model.observe(same[0][0], min(elapsed for _, elapsed in same))
    return steps
