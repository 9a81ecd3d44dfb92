"""One inference engine replica: continuous batching under a KV-memory limit, one event per change.

The engine does not step token by token. Between two changes of its batch (a request joins or
finishes, weights are swapped) every running sequence gains one token per iteration, so the engine
advances all of them at once with the closed-form integrals of :mod:`rollarc.cluster.decode_span`,
and schedules a single wake-up for the next sequence to finish. Events scale with requests, not with
tokens; this is what makes 3,072 GPUs × 100 steps fit in seconds.

Bookkeeping that keeps each change O(log batch):

- ``iters`` counts decode iterations since the engine started; a sequence admitted at ``iters = a``
  with ``n`` tokens to write finishes at ``a + n`` (a heap keyed by that);
- KV tokens held = ``ctx_base + batch · iters`` where ``ctx_base`` sums ``context_at_admit − a``.

Admission is FIFO. A request is admitted while the batch is below ``max_batch`` and the KV its whole
turn will need (context + prompt + response) fits beside what the running turns will need. Reserving
the final length avoids modelling preemption; it is slightly optimistic about KV pressure compared
with an engine that admits on the prompt alone and preempts. Prefill is done on the new prompt tokens
only (the trajectory's earlier turns are in the prefix cache, since turns stick to one engine) and
stalls decoding while it runs, as a chunked-prefill engine does.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import simpy

from rollarc.cluster.decode_span import iterations_in, span_time
from rollarc.cluster.engine_cost import EngineCost

_EPS_ITERS = 1e-6


class SimEngine:
    def __init__(self, env: simpy.Environment, cost: EngineCost, name: str):
        self.env = env
        self.cost = cost
        self.name = name
        self.version = 0
        self.clock = 0.0  # decoding is accounted up to here; > now while a prefill or swap stalls it
        self.iters = 0.0
        self.ctx_base = 0.0
        self.kv_reserved = 0.0
        self.running: list[tuple[float, int, simpy.Event, float, float, tuple[int, int]]] = []
        self.waiting: deque[tuple[float, float, float, simpy.Event]] = deque()
        self._seq = 0
        self._wake_token = 0
        self._wake_at = math.inf
        self.busy_s = 0.0
        self.stall_s = 0.0
        self.decoded_tokens = 0.0
        self.prefilled_tokens = 0.0

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def submit(self, prompt_tokens: float, context_tokens: float, response_tokens: float) -> simpy.Event:
        """Queue one turn; the event's value is ``(version, batch)`` at admission once the turn is done."""
        need = context_tokens + prompt_tokens + response_tokens
        if need > self.cost.kv_capacity_tokens:
            raise ValueError(
                f"engine {self.name}: a turn needs {need:.0f} KV tokens but the engine holds only "
                f"{self.cost.kv_capacity_tokens:.0f}; cap the task's response_tokens/turns or give replicas more units"
            )
        done = self.env.event()
        now = self.env.now
        self._advance(now)
        self.waiting.append((prompt_tokens, context_tokens, response_tokens, done))
        self._admit(now)
        self._schedule(now)
        return done

    def swap_weights(self, version: int, stall_s: float) -> None:
        """Load new weights between iterations: decoding pauses for ``stall_s``; running turns go on."""
        now = self.env.now
        self._advance(now)
        self.clock = max(self.clock, now) + stall_s
        self.stall_s += stall_s
        self.version = version
        self._schedule(now)

    def _advance(self, now: float) -> None:
        """Account the decoding done between ``clock`` and ``now``, then retire finished turns."""
        if now <= self.clock:
            return
        batch = len(self.running)
        if batch:
            dt = now - self.clock
            cost = self.cost.decode_cost(batch, self.ctx_base + batch * self.iters)
            done = iterations_in(cost, dt)
            self.iters += done
            self.decoded_tokens += done * batch
            self.busy_s += dt
        self.clock = now
        self._retire()

    def _retire(self) -> None:
        running = self.running
        while running and running[0][0] <= self.iters + _EPS_ITERS:
            _finish, _seq, done, ctx_offset, need, version_batch = heapq.heappop(running)
            self.ctx_base -= ctx_offset
            self.kv_reserved -= need
            done.succeed(version_batch)

    def _admit(self, now: float) -> None:
        waiting = self.waiting
        max_batch = self.cost.max_batch
        capacity = self.cost.kv_capacity_tokens
        while waiting and len(self.running) < max_batch:
            prompt, context, response, done = waiting[0]
            need = context + prompt + response
            if self.kv_reserved + need > capacity:
                break
            waiting.popleft()
            prefill = self.cost.prefill_time(prompt)
            self.clock = max(self.clock, now) + prefill
            self.busy_s += prefill
            self.prefilled_tokens += prompt
            ctx_offset = context + prompt - self.iters
            self.ctx_base += ctx_offset
            self.kv_reserved += need
            self._seq += 1
            version_batch = (self.version, len(self.running) + 1)
            heapq.heappush(self.running, (self.iters + response, self._seq, done, ctx_offset, need, version_batch))

    def _schedule(self, now: float) -> None:
        """Make sure a wake-up is pending for the next turn to finish (stale ones are ignored)."""
        if not self.running:
            self._wake_at = math.inf
            self._wake_token += 1
            return
        batch = len(self.running)
        target = self.running[0][0]
        cost = self.cost.decode_cost(batch, self.ctx_base + batch * self.iters)
        at = max(self.clock, now) + span_time(cost, target - self.iters)
        if at == self._wake_at:
            return
        self._wake_token += 1
        self._wake_at = at
        token = self._wake_token
        self.env.timeout(at - now).callbacks.append(lambda _e: self._wake(token, target))

    def _wake(self, token: int, target: float) -> None:
        if token != self._wake_token:
            return
        now = self.env.now
        self._wake_at = math.inf
        self._advance(now)
        if self.running and self.iters < target:
            self.iters = target  # the wake-up was computed for exactly this; absorb rounding
            self._retire()
        self._admit(now)
        self._schedule(now)
