"""A co-serving worker on a simulated clock: what the SLO guard is worth, measured without wall-clock noise.

The executor (``rose/coserve.py``) times real engine steps, so its SLO figures carry the machine's noise and
cannot back a test. Here one worker serves a trace and works through an endless backlog of rollout decodes on
a simulated clock. Every step takes what a fixed linear cost (:class:`LinearCost`) says; the guard's latency
models are fitted from the steps the worker ran, as the executor's are. Serving goes first; after each serving
step (or when serving is idle) one rollout step runs, of ``rollout_batch`` decodes:

- **guard on**: the largest batch :func:`rollarc.rose.guard.judge` admits (none: a pause), by the very rule
  (:func:`rollarc.rose.guard.largest_batch`) with which ``CoServingExecutor.capacity`` sizes a replica's headroom;
- **guard off**: the whole batch, always.

A request that arrives during a rollout step waits for its end, and a running request's next token waits for
it too: the delays the guard exists to bound. A request that arrived during the serving step just before is
waiting when the guard decides, with the time it has waited, as in the executor. Deterministic: one trace
gives one set of timings.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rollarc.config.harvest import SLOConfig
from rollarc.rose.guard import ServingState, judge, largest_batch
from rollarc.rose.latency_model import StepLatencyModel, StepShape
from rollarc.rose.slo import RequestTiming
from rollarc.rose.trace import TraceRequest


@dataclass(frozen=True)
class LinearCost:
    """Seconds of one step: ``base + per_decode * decodes + per_prefill * prefill tokens + per_context * context``."""

    base: float
    per_decode: float
    per_prefill: float
    per_context: float = 0.0

    def seconds(self, shape: StepShape) -> float:
        if shape.empty:
            return 0.0
        return (
            self.base
            + self.per_decode * shape.decodes
            + self.per_prefill * shape.prefill_tokens
            + self.per_context * shape.context_tokens
        )

    def calibrated(self) -> StepLatencyModel:
        """A latency model fitted on a spread of steps of this cost (the executor's after its first steps)."""
        model = StepLatencyModel(decay=1.0)
        for decodes in (1, 2, 4, 8, 16):
            for prefill in (0, 16, 64, 256):
                for context in (0, 512, 4096):
                    shape = StepShape(decodes, prefill, context)
                    model.observe(shape, self.seconds(shape))
        return model


@dataclass
class SimOutcome:
    timings: list[RequestTiming]
    rollout_tokens: int
    pauses: int  # rollout steps the guard refused outright
    shrunk: int  # rollout steps the guard cut below rollout_batch
    end_s: float


@dataclass
class _Running:
    request: TraceRequest
    first_s: float
    tokens: int  # generated so far


@dataclass
class CoServingSim:
    serving: LinearCost
    rollout: LinearCost
    slo: SLOConfig
    margin: float = 0.2
    rollout_batch: int = 8
    rollout_context: int = 256  # KV tokens each rollout decode attends over
    guard: bool = True
    serving_model: StepLatencyModel = field(init=False)
    rollout_model: StepLatencyModel = field(init=False)

    def __post_init__(self) -> None:
        self.serving_model = self.serving.calibrated()
        self.rollout_model = self.rollout.calibrated()

    def run(self, trace: list[TraceRequest]) -> SimOutcome:
        arrivals = deque(sorted(trace, key=lambda r: r.arrival_s))
        waiting: deque[TraceRequest] = deque()
        running: list[_Running] = []
        timings: list[RequestTiming] = []
        now = 0.0
        rollout_tokens = pauses = shrunk = 0
        longest_prompt = 0
        while arrivals or waiting or running:
            longest_prompt = max(longest_prompt, _arrive(arrivals, waiting, now))
            if waiting or running:
                now = self._serving_step(now, waiting, running, timings)
            # what arrived during the serving step waits too: the guard must see it (and how long it has waited)
            longest_prompt = max(longest_prompt, _arrive(arrivals, waiting, now))
            batch = self._rollout_batch(now, waiting, running, longest_prompt) if self.rollout_batch else 0
            if self.rollout_batch and batch == 0:
                pauses += 1
            elif batch < self.rollout_batch:
                shrunk += 1
            if batch:
                now += self.rollout.seconds(StepShape(batch, 0, batch * self.rollout_context))
                rollout_tokens += batch
            elif not waiting and not running and arrivals:
                now = max(now, arrivals[0].arrival_s)  # idle until the next request
        return SimOutcome(timings, rollout_tokens, pauses, shrunk, now)

    def _serving_step(
        self, now: float, waiting: deque[TraceRequest], running: list[_Running], timings: list[RequestTiming]
    ) -> float:
        """One step: every waiting request prefilled (its first token), every running one decodes a token."""
        shape = StepShape(
            decodes=len(running) + len(waiting),
            prefill_tokens=sum(r.prompt_tokens for r in waiting),
            context_tokens=sum(r.request.prompt_tokens + r.tokens for r in running),
        )
        end = now + self.serving.seconds(shape)
        for item in running:
            item.tokens += 1
        running.extend(_Running(request, end, 1) for request in waiting)
        waiting.clear()
        for item in [r for r in running if r.tokens >= r.request.output_tokens]:
            running.remove(item)
            timings.append(RequestTiming(item.request.arrival_s, item.first_s, end, item.request.output_tokens))
        return end

    def _rollout_batch(
        self, now: float, waiting: deque[TraceRequest], running: list[_Running], longest_prompt: int
    ) -> int:
        if not self.guard:
            return self.rollout_batch
        state = ServingState(
            running=len(running),
            context_tokens=sum(r.request.prompt_tokens + r.tokens for r in running),
            waiting=len(waiting),
            waiting_prefill_tokens=sum(r.prompt_tokens for r in waiting),
            oldest_wait_s=max(0.0, now - waiting[0].arrival_s) if waiting else 0.0,
            arrival_prefill_tokens=longest_prompt,
            decoding=tuple((now - r.first_s, r.tokens - 1) for r in running),
        )
        models, slo = (self.serving_model, self.rollout_model), self.slo
        return largest_batch(
            self.rollout_batch,
            lambda batch: StepShape(batch, 0, batch * self.rollout_context),
            lambda step: judge(step, state, *models, slo.ttft_p99_ms, slo.tpot_p99_ms, self.margin).admit,
        )


def _arrive(arrivals: deque[TraceRequest], waiting: deque[TraceRequest], now: float) -> int:
    """Move every request that has arrived by ``now`` to ``waiting``; the longest prompt among them (0 if none)."""
    longest = 0
    while arrivals and arrivals[0].arrival_s <= now:
        request = arrivals.popleft()
        waiting.append(request)
        longest = max(longest, request.prompt_tokens)
    return longest
