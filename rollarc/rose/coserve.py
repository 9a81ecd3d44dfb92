"""The co-serving executor: one worker runs the serving engine S and a rollout engine R, serving first.

Each :meth:`CoServingExecutor.poll`:

1. admits every serving request that has arrived (all of them: serving is never refused);
2. runs one serving step if serving has work, and feeds its measured time to the serving latency model;
3. enforces the shared memory budget: serving's KV reservation (prompt + max output of every serving
   request) plus rollout's must fit ``memory_tokens``; when it does not, rollout turns are **preempted**
   (newest first): aborted in R with their KV kept in R's prefix cache under the trajectory id, and queued
   again with their partial output;
4. picks the largest rollout step (running decodes plus queued turns admitted, in order) that the SLO guard
   (:mod:`rollarc.rose.guard`) admits. When the guard refuses the running decodes as one batch but admits
   fewer, the newest running turns beyond that are **preempted** (as under memory pressure: partial output
   kept, KV in R's prefix cache, queued first) and the rest decode: rollout makes progress at the rate the
   guard allows, as :meth:`capacity` reports it, instead of stalling every turn it holds until serving calms
   (a turn stuck here stalls its trajectory). If not even one decode is admitted, rollout **pauses** (its KV
   stays where it is) until serving calms down; each pause and preemption is counted by its cause, the guard's
   or memory's or slots' (:mod:`rollarc.rose.guard_actions`);
5. runs that rollout step and feeds its time to the rollout latency model.

The guard budgets the serving step that follows a rollout step at its prediction times how much longer such
steps have run than predicted (:mod:`rollarc.rose.aftermath`; ``budget_aftermath=False``: at its prediction).

:meth:`calibrate` fits both latency models from a few steps of each engine before any work arrives (a cold
rollout model would refuse every step, and so never learn). :meth:`withdraw` hands every rollout turn back,
with its partial output, for migration to another worker (the elastic scheduler re-routes it; the new worker
re-prefills it). :meth:`capacity` is the number of rollout
sequences the guard would let decode now: the headroom the elastic scheduler provisions from.

Memory is a logical token budget: S and R each preallocate their own KV slots; the budget decides how
many of R's are used. R's prefix cache (``prefix_cache_tokens``) is outside it.

One concept, although just over 500 lines: the poll loop and the state its steps share (serving requests
admitted, rollout turns queued and running, the recent step spans the guard's predictions are corrected by).
Timing one engine's step and calibrating its latency model are in :mod:`rollarc.rose.step_timing`, the guard's
decisions in :mod:`rollarc.rose.guard`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import Completion, SamplingParams
from rollarc.rose.aftermath import AftermathRatio
from rollarc.rose.guard import ServingState, Verdict, judge, largest_batch
from rollarc.rose.latency_model import StepLatencyModel, StepShape
from rollarc.rose.slo import RequestTiming, SLOConfig, overlap_s
from rollarc.rose.step_timing import calibrate_model, timed_step
from rollarc.rose.turns import Turn


@dataclass(frozen=True)
class ServingRequest:
    request_id: str
    arrival_s: float  # on the executor's clock
    prompt_ids: list[int]
    max_tokens: int


@dataclass
class PollResult:
    served: list[RequestTiming] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    worked: bool = False


class CoServingExecutor:
    def __init__(
        self,
        serving: LLMEngine | None,
        rollout: LLMEngine | None,
        slo: SLOConfig | None,
        *,
        margin: float = 0.2,
        memory_tokens: int = 1 << 30,
        budget_aftermath: bool = True,
        name: str = "coserve",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        self.serving, self.rollout, self.slo = serving, rollout, slo
        self.margin, self.memory_tokens, self.name, self.clock = margin, memory_tokens, name, clock
        self.serving_model = StepLatencyModel()
        self.rollout_model = StepLatencyModel()
        # the serving step after a rollout step, measured over predicted; the guard scales its budget by it
        self.aftermath = AftermathRatio()
        self.budget_aftermath = budget_aftermath
        self._arrivals: deque[ServingRequest] = deque()  # not yet arrived (sorted by arrival)
        self._serving: dict[str, ServingRequest] = {}  # admitted to S, unfinished
        self._queued: deque[Turn] = deque()  # rollout turns waiting for a guarded step
        self._running: dict[str, Turn] = {}  # request id in R -> turn
        self._recent_prompts: deque[int] = deque(maxlen=64)
        # (start, end) of each rollout step with the loop time after it, while a serving request may still need them
        self._rollout_spans: deque[tuple[float, float]] = deque()
        self._serving_spans: deque[tuple[float, float]] = deque()  # (start, end) of each serving step, likewise
        self.counters: dict[str, int] = {
            "serving_steps": 0,
            "serving_requests": 0,
            "rollout_steps": 0,
            "rollout_tokens": 0,
            "rollout_ms": 0,
            "loop_gap_ms": 0,  # time between a rollout step and the next poll (the caller's loop), fed to the model
            "rollout_overruns": 0,
            "turns_done": 0,
            "pauses": 0,  # each pause once, by its cause (rollarc.rose.guard_actions): the three below
            "paused_for_slo": 0,  # the guard refused every rollout step it was asked about
            "paused_for_memory": 0,  # the next queued turn did not fit beside serving's KV reservation
            "paused_for_slots": 0,  # the rollout engine had no free sequence slot for it
            "preemptions": 0,  # for memory and for the SLO
            "preempted_for_slo": 0,  # running turns preempted so that the guard admits the rest
            "preempted_for_memory": 0,  # running turns preempted because serving's reservation grew
            "withdrawn": 0,
            "refused_tpot": 0,
            "refused_ttft_waiting": 0,
            "refused_ttft_arrival": 0,
            # serving steps right after a rollout step vs after a serving step: measured and predicted time (us);
            # a rollout step that slows the serving step after it (caches evicted) shows as a higher ratio
            "serving_after_rollout_steps": 0,
            "serving_after_rollout_us": 0,
            "serving_after_rollout_predicted_us": 0,
            "serving_after_serving_steps": 0,
            "serving_after_serving_us": 0,
            "serving_after_serving_predicted_us": 0,
        }
        self._last_step: str | None = None  # "serving" or "rollout": which engine stepped last on this worker

    # ------------------------------------------------------------------ inputs
    def submit_serving(self, request: ServingRequest) -> None:
        """Queue a serving request that will arrive at ``request.arrival_s`` (in arrival order)."""
        if self.serving is None:
            raise ValueError(f"{self.name} has no serving engine: it runs rollouts only")
        if self._arrivals and request.arrival_s < self._arrivals[-1].arrival_s:
            raise ValueError("serving requests must be submitted in arrival order")
        self._arrivals.append(request)

    def submit_turn(self, turn: Turn) -> None:
        if self.rollout is None:
            raise ValueError(f"{self.name} has no rollout engine: it serves only")
        if self.serving is not None and self.slo is None:
            raise ValueError(f"{self.name} has no SLO yet: it takes rollout turns only once its SLO is set")
        turn.workers.append(self.name)
        self._queued.append(turn)

    def withdraw(self) -> list[Turn]:
        """Stop all rollout work here and hand every turn back with its progress (for migration)."""
        self._abort_running(list(self._running))
        turns = list(self._queued)
        self._queued.clear()
        for turn in turns:
            turn.migrations += 1
        self.counters["withdrawn"] += len(turns)
        return turns

    def cancel(self, turn_id: str) -> Turn | None:
        """Drop one turn (its trajectory was cancelled, or the caller went away); returns it, or None if unknown."""
        for request_id, turn in list(self._running.items()):
            if turn.turn_id == turn_id:
                self._abort_running([request_id])
                break
        for turn in self._queued:
            if turn.turn_id == turn_id:
                self._queued.remove(turn)
                return turn
        return None

    # ------------------------------------------------------------------ state
    def turns(self) -> list[Turn]:
        """Every rollout turn held here, running or queued."""
        return [*self._running.values(), *self._queued]

    @property
    def rollout_turns(self) -> int:
        return len(self._queued) + len(self._running)

    def serving_idle(self) -> bool:
        return not self._serving and not self._arrivals

    def next_arrival_s(self) -> float | None:
        return self._arrivals[0].arrival_s if self._arrivals else None

    def serving_state(self, now: float) -> ServingState:
        if self.serving is None:
            return ServingState(0, 0, 0, 0, 0.0, 0)
        scheduler = self.serving.scheduler
        waiting = list(scheduler.waiting)
        oldest = min((self._serving[r.request_id].arrival_s for r in waiting), default=now)
        return ServingState(
            running=len(scheduler.running),
            context_tokens=sum(r.num_tokens for r in scheduler.running),
            waiting=len(waiting),
            waiting_prefill_tokens=sum(len(r.prompt_ids) for r in waiting),
            oldest_wait_s=max(0.0, now - oldest),
            arrival_prefill_tokens=max(self._recent_prompts, default=0),
            decoding=tuple(
                (now - r.first_token_time, len(r.output_ids) - 1)
                for r in scheduler.running
                if r.first_token_time is not None
            ),
        )

    def capacity(self, now: float | None = None, limit: int = 256, turn_tokens: int = 256) -> int:
        """Rollout turns this worker can hold now: the decode batch the guard admits, bounded by memory.

        0 while serving is too busy. ``turn_tokens``: the KV reservation assumed for a turn when none is here.
        """
        if self.rollout is None or (self.serving is not None and self.slo is None):
            return 0  # no SLO yet (it is being measured): nothing to lend
        state = self.serving_state(self.clock() if now is None else now)
        held = [*self._running.values(), *self._queued]
        context = sum(len(t.resume_prompt) for t in self._running.values())
        per_turn = self._rollout_reservation(held) // len(held) if held else turn_tokens
        free = self.memory_tokens - self._serving_reservation() - self._rollout_reservation(held)
        limit = min(limit, len(held) + max(0, free) // max(1, per_turn))
        running = max(1, len(self._running))
        return largest_batch(
            limit,
            lambda batch: StepShape(decodes=batch, context_tokens=context * batch // running),
            lambda step: self._judge(step, state).admit,
        )

    # ------------------------------------------------------------------ calibration
    def calibrate(self, prompt_tokens: int) -> dict[str, int]:
        """Fit both latency models from steps run now, before any serving request or rollout turn is here.

        Without this, the rollout model is cold: it predicts its pessimistic prior, the guard admits no rollout
        step against an SLO derived from serving alone, no rollout step ever runs, and so the model never learns
        (the replica is never lent). The steps span the shapes the guard asks about: prefills of up to
        ``prompt_tokens`` (each engine's own limit permitting) and decode batches of 1 up to ``max_num_seqs``.
        Greedy requests: no sampling generator is drawn from. Returns the steps measured per engine. The guard's
        arrival budget starts at ``prompt_tokens`` (the longest prompt serving may send) until serving's own
        prompts replace it.
        """
        if self._serving or self._arrivals or self._running or self._queued:
            raise ValueError(f"{self.name}: calibrate before any serving request or rollout turn is submitted")
        steps = {}
        for role, engine, model in (
            ("serving", self.serving, self.serving_model),
            ("rollout", self.rollout, self.rollout_model),
        ):
            steps[role] = 0 if engine is None else calibrate_model(engine, model, prompt_tokens, self.clock)
        if self.serving is not None:
            # until serving's own prompts are seen, budget an arrival for the longest prompt it may send: with an
            # empty history the guard budgeted no prefill at all, so the first long prompts met rollout steps
            # sized as if none would come
            self._recent_prompts.append(max(1, min(prompt_tokens, self.serving.max_model_len - 1)))
        return steps

    # ------------------------------------------------------------------ the loop
    def poll(self) -> PollResult:
        """One iteration: admit arrivals, one serving step, then at most one guarded rollout step."""
        result = PollResult()
        self._observe_rollout(self.clock())
        self._admit_arrivals(self.clock())
        if self.serving is not None and self.serving.has_unfinished():
            result.served = self._serving_step()
            result.worked = True
        if self.rollout is not None and (self._running or self._queued):
            # what arrived during the serving step is waiting now: the guard must see it, and how long it waited
            self._admit_arrivals(self.clock())
            self._enforce_memory()
            result.turns = self._rollout_step()
            result.worked = result.worked or bool(result.turns) or self._stepped
        return result

    def _admit_arrivals(self, now: float) -> None:
        """Hand every serving request that has arrived by ``now`` to the serving engine (it waits there)."""
        while self.serving is not None and self._arrivals and self._arrivals[0].arrival_s <= now:
            request = self._arrivals.popleft()
            self.serving.add_request(
                request.prompt_ids,
                SamplingParams(temperature=0.0, max_tokens=request.max_tokens, ignore_eos=True),
                request_id=request.request_id,
            )
            self._serving[request.request_id] = request
            self._recent_prompts.append(len(request.prompt_ids))
            self.counters["serving_requests"] += 1

    def _serving_step(self) -> list[RequestTiming]:
        assert self.serving is not None
        finished, shape, start, elapsed = timed_step(self.serving, self.clock)
        if self._last_step is not None:
            after = f"serving_after_{self._last_step}"
            predicted = self.serving_model.predict(shape)
            self.counters[f"{after}_steps"] += 1
            self.counters[f"{after}_us"] += round(1e6 * elapsed)
            self.counters[f"{after}_predicted_us"] += round(1e6 * predicted)
            if self._last_step == "rollout":
                self.aftermath.observe(elapsed, predicted)
        self._last_step = "serving"
        self.serving_model.observe(shape, elapsed)
        self.counters["serving_steps"] += 1
        # The step's own span, not one ending at a later clock read: a request that arrived in a gap and finished
        # in this step ends inside it, and a span shifted past its finish would give it no serving time at all.
        self._serving_spans.append((start, start + elapsed))
        timings = [self._timing(c) for c in finished]
        self._trim_spans(self._serving_spans, self.clock())
        return timings

    def _timing(self, completion: Completion) -> RequestTiming:
        request = self._serving.pop(completion.request_id)
        first = completion.first_token_time if completion.first_token_time is not None else completion.finish_time
        return RequestTiming(
            request.arrival_s,
            first,
            completion.finish_time,
            completion.num_tokens,
            overlap_s(self._rollout_spans, request.arrival_s, first),
            overlap_s(self._rollout_spans, first, completion.finish_time),
            overlap_s(self._serving_spans, request.arrival_s, first),
            overlap_s(self._serving_spans, first, completion.finish_time),
        )

    def _trim_spans(self, spans: deque[tuple[float, float]], now: float) -> None:
        """Drop the spans that ended before every serving request still here arrived: they are no one's any more."""
        oldest = min((r.arrival_s for r in self._serving.values()), default=None)
        if oldest is None:
            oldest = self._arrivals[0].arrival_s if self._arrivals else now
        while spans and spans[0][1] < oldest:
            spans.popleft()

    # ------------------------------------------------------------------ rollout
    def _judge(self, step: StepShape, state: ServingState) -> Verdict:
        if self.serving is None:  # a dedicated rollout worker: no SLO to guard
            return Verdict(True, "ok", 0.0, 0.0)
        assert self.slo is not None  # no turn is taken before it is set (submit_turn)
        return judge(
            step,
            state,
            self.serving_model,
            self.rollout_model,
            self.slo.ttft_p99_ms,
            self.slo.tpot_p99_ms,
            self.margin,
            self.aftermath.factor if self.budget_aftermath else 1.0,
        )

    def _serving_reservation(self) -> int:
        pending = sum(len(r.prompt_ids) + r.max_tokens for r in self._serving.values())
        return pending

    def _rollout_reservation(self, turns: list[Turn]) -> int:
        return sum(len(t.prompt_ids) + t.max_tokens for t in turns)

    def _enforce_memory(self) -> None:
        """Preempt the newest running turns until serving's reservation and rollout's fit the budget."""
        serving = self._serving_reservation()
        running = list(self._running)
        victims = []
        while running and serving + self._rollout_reservation([self._running[r] for r in running]) > self.memory_tokens:
            victims.append(running.pop())
        if victims:
            self.counters["preemptions"] += len(victims)
            self.counters["preempted_for_memory"] += len(victims)
            for request_id in victims:
                self._running[request_id].preemptions += 1
            self._abort_running(victims, requeue=True)

    def _abort_running(self, request_ids: list[str], requeue: bool = False) -> None:
        assert self.rollout is not None
        for request_id in request_ids:
            self.rollout.abort(request_id)
        for completion in self.rollout.take_finished():
            turn = self._running.pop(completion.request_id, None)
            if turn is None:
                continue
            turn.extend(completion.token_ids, completion.logprobs, completion.token_versions)
            if requeue:
                self._queued.appendleft(turn)
            else:
                self._queued.append(turn)

    def _shrink_to_admitted(self, state: ServingState) -> None:
        """If the guard refuses the running decodes as one batch, preempt the newest until it admits the rest.

        Nothing changes when the whole batch is admitted, or when not even one decode is (that is a pause)."""
        running = list(self._running)
        contexts = [len(self._running[r].resume_prompt) for r in running]
        if not running or self._judge(StepShape(decodes=len(running), context_tokens=sum(contexts)), state).admit:
            return
        keep = next(
            (
                k
                for k in range(len(running) - 1, 0, -1)
                if self._judge(StepShape(decodes=k, context_tokens=sum(contexts[:k])), state).admit
            ),
            0,
        )
        if keep == 0:
            return
        victims = list(reversed(running[keep:]))  # newest first, as under memory pressure
        self.counters["preemptions"] += len(victims)
        self.counters["preempted_for_slo"] += len(victims)
        for request_id in victims:
            self._running[request_id].preemptions += 1
        self._abort_running(victims, requeue=True)

    _stepped = False
    _paused: str | None = None  # the cause of the pause under way: "slo", "memory" or "slots"
    _last_rollout: tuple[StepShape, float, float] | None = None  # (shape, seconds, when it ended)

    def _observe_rollout(self, now: float) -> None:
        """Feed the rollout model the last rollout step's time *plus* the time until this poll.

        Serving waits for both: between two polls the replica's event loop answers the router (turns submitted,
        finished turns handed back, their timeline spans), work that exists because rollout runs here and that
        the engine step's own clock does not see. A serving request that arrives then waits for it, so the guard
        must budget it as part of the step (``loop_gap_ms`` counts it).
        """
        if self._last_rollout is None:
            return
        shape, elapsed, ended = self._last_rollout
        self._last_rollout = None
        gap = max(0.0, now - ended)
        self.rollout_model.observe(shape, elapsed + gap)
        self.counters["loop_gap_ms"] += round(1000 * gap)
        if self.serving is not None:
            self._rollout_spans.append((ended - elapsed, max(now, ended)))
            self._trim_spans(self._rollout_spans, now)

    def _rollout_step(self) -> list[Turn]:
        assert self.rollout is not None
        self._stepped = False
        now = self.clock()
        state = self.serving_state(now)
        self._shrink_to_admitted(state)
        version = self.rollout.version
        context = sum(len(t.resume_prompt) for t in self._running.values())
        free = (
            self.memory_tokens - self._serving_reservation() - self._rollout_reservation(list(self._running.values()))
        )
        slots = self.rollout.kv.max_num_seqs - len(self.rollout.scheduler.running) - len(self.rollout.scheduler.waiting)
        admit: list[Turn] = []
        prefill = 0
        best: StepShape | None = None
        blocked: str | None = None  # why the first queued turn not admitted was held back
        candidate = StepShape(decodes=len(self._running), context_tokens=context)
        if candidate.decodes and self._judge(candidate, state).admit:
            best = candidate
        for turn in self._queued:
            need = len(turn.prompt_ids) + turn.max_tokens
            if len(admit) >= slots or need > free:
                blocked = "slots" if len(admit) >= slots else "memory"
                break
            hit = self.rollout.prefix_cache.lookup(turn.traj_id, turn.resume_prompt, version)
            tokens = len(turn.resume_prompt) - (hit[1] if hit is not None else 0)
            candidate = StepShape(decodes=len(self._running), prefill_tokens=prefill + tokens, context_tokens=context)
            verdict = self._judge(candidate, state)
            if verdict.admit:  # and it must decode next to the others afterwards, or it would be preempted again
                after = StepShape(
                    decodes=len(self._running) + len(admit) + 1,
                    context_tokens=context + sum(len(t.resume_prompt) for t in admit) + len(turn.resume_prompt),
                )
                verdict = self._judge(after, state)
            if not verdict.admit:
                self.counters[f"refused_{verdict.reason}"] += 1
                blocked = "slo"
                break
            admit.append(turn)
            prefill += tokens
            free -= need
            best = candidate
        if best is None:
            # running turns are held only when the guard refused them; otherwise the first queued turn says why
            cause = "slo" if self._running else blocked
            assert cause is not None  # a queued turn was either admitted (best is set) or held back
            if cause != self._paused:  # count each pause once, not each poll it lasts; again if its cause changes
                self.counters["pauses"] += 1
                self.counters[f"paused_for_{cause}"] += 1
                self._paused = cause
            return []
        self._paused = None
        for turn in admit:
            self._queued.remove(turn)
            request_id = f"{turn.turn_id}@{len(turn.workers)}.{turn.preemptions}"
            self.rollout.add_request(
                turn.resume_prompt,
                turn.sampling(),
                request_id=request_id,
                cache_key=turn.traj_id,
                skip_draws=len(turn.output_ids),  # a resumed turn continues its seed's draws where it stopped
            )
            self._running[request_id] = turn
        before = self.rollout.counters["prefill_tokens"]
        start = self.clock()
        finished = self.rollout.step()
        elapsed = self.clock() - start
        self._stepped = True
        self._last_step = "rollout"
        shape = StepShape(
            decodes=best.decodes,
            prefill_tokens=self.rollout.counters["prefill_tokens"] - before,
            context_tokens=context,
        )
        predicted = self.rollout_model.predict(best)
        self._last_rollout = (shape, elapsed, self.clock())  # observed at the next poll, with what came between
        self.counters["rollout_steps"] += 1
        self.counters["rollout_ms"] += round(1000 * elapsed)
        self.counters["rollout_overruns"] += elapsed > 1.5 * predicted + 0.002  # the guard's blind spot
        done = []
        for completion in finished:
            turn = self._running.pop(completion.request_id)
            turn.extend(completion.token_ids, completion.logprobs, completion.token_versions)
            self.counters["rollout_tokens"] += completion.num_tokens
            if completion.finish_reason == "abort":
                self._queued.append(turn)
                continue
            turn.finish_reason, turn.error = completion.finish_reason, completion.error
            self.counters["turns_done"] += 1
            done.append(turn)
        return done
