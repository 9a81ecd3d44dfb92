"""The SLO guard: may one rollout step run now, next to the serving engine, without breaking the SLO?

Serving and rollout share one worker, so their steps run one after the other. A rollout step of predicted
length ``r`` therefore delays (1) every running serving request's next token by ``r`` and (2) the first
token of every serving request waiting, or arriving, while it runs, by up to ``r``. The guard admits the
step only when, with that delay added, the predictions stay within the SLO minus a margin:

- TPOT: ``s_decode + r <= (1 - margin) * tpot_p99_ms``, where ``s_decode`` is the predicted serving step
  (its running decodes plus the prefills waiting), whenever serving has running requests; and, since a
  request's TPOT is the mean of its gaps, for every running request ``(elapsed + s_decode + r) / (n + 1)``
  stays within the same budget (``elapsed``: seconds since its first token, ``n``: tokens since then);
- TTFT: ``waited + r + s_prefill <= (1 - margin) * ttft_p99_ms`` for the oldest waiting serving request,
  and ``r + s_arrival <= (1 - margin) * ttft_p99_ms`` for one that arrives just as the step starts
  (``s_arrival``: the predicted prefill of the longest recent prompt).

The serving step the guard budgets runs right after the rollout step, and may run longer than the latency model
predicts there (``serving_scale``: :mod:`rollarc.rose.aftermath`); both serving predictions are scaled by it.

Limits (docs/rose.md): the guarantee is only as good as the latency model. A step that runs longer than
predicted (another process took the core) can still delay serving; the margin and the model's forgetting
are what absorb that. Serving's own bursts can break the SLO with no rollout at all: the guard only ensures
that rollout never adds the delay that breaks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rollarc.rose.latency_model import StepLatencyModel, StepShape


@dataclass(frozen=True)
class ServingState:
    running: int  # serving requests decoding
    context_tokens: int  # KV tokens those requests attend over
    waiting: int  # serving requests not yet prefilled
    waiting_prefill_tokens: int
    oldest_wait_s: float  # how long the oldest waiting request has waited (0 if none)
    arrival_prefill_tokens: int  # prompt length to budget for a request that arrives now
    decoding: tuple[tuple[float, int], ...] = ()  # per running request: (s since its first token, tokens since)


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str  # "ok", "tpot", "ttft_waiting" or "ttft_arrival"
    rollout_s: float
    serving_s: float


def judge(
    step: StepShape,
    serving: ServingState,
    serving_model: StepLatencyModel,
    rollout_model: StepLatencyModel,
    ttft_ms: float,
    tpot_ms: float,
    margin: float,
    serving_scale: float = 1.0,
) -> Verdict:
    """Admit ``step`` (a rollout step) or say which SLO it would endanger.

    ``serving_scale``: the serving step after a rollout step, measured over predicted (1: as predicted).
    """
    r = rollout_model.predict(step)
    serving_step = StepShape(
        decodes=serving.running + serving.waiting,
        prefill_tokens=serving.waiting_prefill_tokens,
        context_tokens=serving.context_tokens,
    )
    s = serving_scale * serving_model.predict(serving_step)
    ttft_budget = (1.0 - margin) * ttft_ms / 1000.0
    tpot_budget = (1.0 - margin) * tpot_ms / 1000.0
    if serving.running and s + r > tpot_budget:
        return Verdict(False, "tpot", r, s)
    # a request's TPOT is its mean gap: one whose earlier gaps (serving's own prefills) used up the slack
    # must not be handed a long one now
    if any((elapsed + s + r) / (tokens + 1) > tpot_budget for elapsed, tokens in serving.decoding):
        return Verdict(False, "tpot", r, s)
    if serving.waiting and serving.oldest_wait_s + r + s > ttft_budget:
        return Verdict(False, "ttft_waiting", r, s)
    arrival = serving_scale * serving_model.predict(
        StepShape(
            decodes=serving.running + serving.waiting + 1,
            prefill_tokens=serving.waiting_prefill_tokens + serving.arrival_prefill_tokens,
            context_tokens=serving.context_tokens,
        )
    )
    if r + arrival > ttft_budget:
        return Verdict(False, "ttft_arrival", r, s)
    return Verdict(True, "ok", r, s)


def largest_batch(limit: int, shape: Callable[[int], StepShape], admits: Callable[[StepShape], bool]) -> int:
    """The largest rollout decode batch of 1 .. ``limit`` that the guard admits (0: a pause).

    Tried smallest first up to the first refusal: a larger batch predicts a longer step. One rule for a co-serving
    replica's headroom (``CoServingExecutor.capacity``, what lending and the router's capacity follow) and for the
    guard's simulation (``rose/guard_sim.py``), which sizes its rollout steps by it. ``shape``: the step of a batch.
    """
    best = 0
    for batch in range(1, limit + 1):
        if not admits(shape(batch)):
            break
        best = batch
    return best
