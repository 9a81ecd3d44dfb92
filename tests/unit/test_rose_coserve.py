"""The co-serving executor on two nano models: serving first, bursts pause rollout, memory pressure preempts
(prefix kept), withdrawal migrates turns with their versions, a lost worker's turns restart elsewhere.

The clock is fake and the latency models are fixed by hand, so the guard's decisions are deterministic
(no wall-clock assertions)."""

from __future__ import annotations

import time

import pytest

from rollarc.engine import EngineConfig, LLMEngine
from rollarc.engine.types import SamplingParams
from rollarc.policy.dispatcher import BORROWED_POOL
from rollarc.rose.coserve import CoServingExecutor, ServingRequest
from rollarc.rose.latency_model import StepLatencyModel, StepShape
from rollarc.rose.slo import RequestTiming, SLOConfig
from rollarc.rose.turns import Turn
from rollarc.runtime.scheduling import make_dispatcher
from tests.unit.test_engine_models import nano_policy, random_prompts


class FixedModel(StepLatencyModel):
    """``per_decode`` s per decoding sequence, ``per_token`` s per prefill token; measurements are ignored."""

    def __init__(self, per_decode: float, per_token: float) -> None:
        super().__init__()
        self.per_decode, self.per_token = per_decode, per_token

    def observe(self, shape: StepShape, seconds: float) -> None:
        return None

    def predict(self, shape: StepShape) -> float:
        return shape.decodes * self.per_decode + shape.prefill_tokens * self.per_token


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _engine(seed: int) -> LLMEngine:
    model, _ = nano_policy(seed)
    return LLMEngine(model, EngineConfig(max_num_seqs=8, prefix_cache_tokens=4096, seed=seed))


def _executor(memory_tokens: int = 1 << 20, serving: bool = True, name: str = "bor") -> CoServingExecutor:
    ex = CoServingExecutor(
        _engine(1) if serving else None,
        _engine(2),
        SLOConfig(ttft_p99_ms=1000.0, tpot_p99_ms=20.0),
        margin=0.2,
        memory_tokens=memory_tokens,
        name=name,
        clock=Clock(),
    )
    ex.serving_model = FixedModel(0.004, 0.0)  # 4 ms per serving decode
    ex.rollout_model = FixedModel(0.002, 0.0)  # 2 ms per rollout decode
    return ex


def _turns(n: int, max_tokens: int = 6) -> list[Turn]:
    return [Turn(f"t{i}.0", f"t{i}", p, max_tokens) for i, p in enumerate(random_prompts([5 + i for i in range(n)]))]


def _serve(ex: CoServingExecutor, n: int, max_tokens: int, start: int = 0) -> None:
    for i, p in enumerate(random_prompts([4] * n, seed=7 + start)):
        ex.submit_serving(ServingRequest(f"s{start + i}", 0.0, p, max_tokens))


def _drain(ex: CoServingExecutor, limit: int = 200) -> list[Turn]:
    done: list[Turn] = []
    for _ in range(limit):
        result = ex.poll()
        done += result.turns
        if not result.worked and not ex.rollout_turns and ex.serving_idle():
            break
    return done


def test_idle_serving_lends_everything_and_turns_finish() -> None:
    ex = _executor()
    turns = _turns(3)
    for t in turns:
        ex.submit_turn(t)
    done = _drain(ex)
    assert sorted(t.turn_id for t in done) == ["t0.0", "t1.0", "t2.0"]
    assert all(len(t.output_ids) == 6 and t.token_versions == [0] * 6 for t in done)
    assert ex.counters["pauses"] == 0 and ex.counters["turns_done"] == 3


def test_burst_pauses_rollout_until_serving_has_headroom() -> None:
    ex = _executor()
    for t in _turns(2):
        ex.submit_turn(t)
    ex.poll()  # rollout starts: 2 running turns
    assert ex.counters["rollout_steps"] == 1
    _serve(ex, 3, max_tokens=4)  # burst: serving step 12 ms + rollout 4 ms = 16 ms <= 16 ms: admitted
    ex.poll()
    assert ex.counters["rollout_steps"] == 2
    _serve(ex, 1, max_tokens=8, start=3)  # 4 serving: 16 ms + 4 ms > 16 ms: rollout must yield
    steps = ex.counters["rollout_steps"]
    result = ex.poll()
    assert result.turns == [] and ex.counters["rollout_steps"] == steps
    assert ex.counters["pauses"] == 1 and ex.counters["refused_tpot"] >= 0
    assert ex.capacity() == 0
    assert len(ex.rollout.scheduler.running) == 2  # paused, not preempted: still in their KV slots
    done = []
    for _ in range(100):
        before = ex.counters["rollout_steps"]
        done += ex.poll().turns
        if ex.counters["rollout_steps"] > before:  # only ever next to a serving step that leaves room
            assert 0.004 * len(ex.serving.scheduler.running) + 0.002 * 2 <= 0.016 + 1e-12
        if len(done) == 2:
            break
    assert len(done) == 2 and ex.counters["preemptions"] == 0 and ex.counters["pauses"] == 1


def test_memory_pressure_preempts_and_resume_reuses_the_prefix() -> None:
    ex = _executor(memory_tokens=40)
    (turn,) = _turns(1, max_tokens=10)  # reserves 5 + 10 = 15 tokens
    ex.submit_turn(turn)
    ex.poll()
    ex.poll()
    ex.poll()
    assert len(turn.output_ids) == 0 and ex.rollout_turns == 1
    _serve(ex, 2, max_tokens=10)  # serving reserves 2 x 14 = 28: 28 + 15 > 40
    ex.poll()
    assert ex.counters["preemptions"] == 1 and turn.preemptions == 1
    assert len(turn.output_ids) == 3 and turn.token_versions == [0, 0, 0]  # partial output kept
    done = _drain(ex)
    assert done == [turn] and len(turn.output_ids) == 10 and len(turn.logprobs) == 10
    assert ex.rollout.counters["prefix_hits"] == 1  # resumed from its cached prefix, not re-prefilled whole


def test_withdraw_migrates_turns_and_keeps_token_versions() -> None:
    borrowed = _executor(name="bor")
    dedicated = _executor(serving=False, name="ded")
    dedicated.rollout.version = 3  # the dedicated worker already runs a newer policy
    turns = _turns(2, max_tokens=6)
    for t in turns:
        borrowed.submit_turn(t)
    borrowed.poll()
    borrowed.poll()
    moved = borrowed.withdraw()
    assert borrowed.rollout_turns == 0 and borrowed.counters["withdrawn"] == 2
    assert sorted(t.turn_id for t in moved) == ["t0.0", "t1.0"]
    for t in moved:
        assert t.token_versions == [0, 0] and t.migrations == 1
        dedicated.submit_turn(t)
    done = _drain(dedicated)
    assert len(done) == 2
    for t in done:
        assert t.token_versions == [0, 0, 3, 3, 3, 3] and t.workers == ["bor", "ded"]


def test_a_serving_worker_that_disappears_loses_only_its_in_flight_turns() -> None:
    router = make_dispatcher({}, dedicated_first=True)  # routed as the Router routes them
    workers = {"ded": _executor(serving=False, name="ded"), "bor": _executor(name="bor")}
    router.add_replica("ded", "dedicated", 1)
    router.add_replica("bor", BORROWED_POOL, 2)
    turns = {t.turn_id: t for t in _turns(3, max_tokens=4)}
    routes = {turn_id: router.start_turn(t.traj_id, None) for turn_id, t in turns.items()}
    for turn_id, route in routes.items():
        workers[route.replica].submit_turn(turns[turn_id])
    workers["bor"].poll()
    del workers["bor"]  # the serving worker is gone, with its KV and its partial output
    assert router.mark_dead("bor")
    lost = [turn_id for turn_id, route in routes.items() if route.replica == "bor"]
    assert lost == ["t1.0", "t2.0"]
    for turn_id in lost:  # the Router fails each over: it ends on the dead replica and starts again
        router.finish_turn(routes[turn_id])
        turns[turn_id] = Turn(turn_id, turns[turn_id].traj_id, turns[turn_id].prompt_ids, 4)  # restart the turn
        routes[turn_id] = router.start_turn(turns[turn_id].traj_id, None)
        assert routes[turn_id].replica == "ded"
        workers["ded"].submit_turn(turns[turn_id])
    finished = []
    for _ in range(100):
        for t in workers["ded"].poll().turns:
            router.finish_turn(routes[t.turn_id])
            finished.append(t.turn_id)
        if len(finished) == 3:
            break
    assert sorted(finished) == ["t0.0", "t1.0", "t2.0"]
    assert router.replicas["ded"].outstanding == 0


def test_a_turn_uses_the_callers_sampling_and_a_cancelled_turn_leaves() -> None:
    ex = _executor(serving=False)
    stop_at_once = SamplingParams(temperature=1.0, max_tokens=6, stop_token_ids=tuple(range(256)))
    first, second, third = _turns(3)
    first.params = stop_at_once  # every token is a stop token: one token, finish "stop"
    for t in (first, second, third):
        ex.submit_turn(t)
    assert ex.cancel("t2.0") is third and ex.cancel("nope") is None
    assert [t.turn_id for t in ex.turns()] == ["t0.0", "t1.0"]
    done = {t.turn_id: t for t in _drain(ex)}
    assert set(done) == {"t0.0", "t1.0"}
    assert done["t0.0"].finish_reason == "stop" and len(done["t0.0"].output_ids) == 1
    assert done["t1.0"].finish_reason == "length" and len(done["t1.0"].output_ids) == 6
    ex.submit_turn(third)
    ex.poll()  # it runs now
    assert ex.cancel("t2.0") is third and ex.rollout_turns == 0  # cancelled while running: aborted in R
    assert len(third.output_ids) == len(third.token_versions) <= 6


def test_a_seeded_turn_generates_the_same_tokens_on_a_borrowed_executor_as_on_a_dedicated_engine() -> None:
    """Which replica generates a turn, and whether it is preempted or migrated on the way, does not change its tokens.

    Both sides hold the same weights; each request draws from its own seeded generator. Uninterrupted, the borrowed
    executor (serving beside it) gives bitwise the dedicated engine's tokens and log-probs. A turn resumed after a
    preemption or a migration continues its seed's draws where it stopped (regression: it restarted them, and its
    later tokens differed); its log-probs after the resume come from a prefill of the partial output instead of
    decode steps, so they agree to float rounding (about 1e-6 here), not bitwise.
    """
    prompts = random_prompts([5, 9, 13, 6])
    params = [SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True, seed=7 + i) for i in range(4)]
    reference = _engine(2).generate(prompts, params)

    borrowed = _executor()
    _serve(borrowed, 2, max_tokens=5)
    turns = [Turn(f"t{i}.0", f"t{i}", p, 10, params=sp) for i, (p, sp) in enumerate(zip(prompts, params, strict=True))]
    for t in turns:
        borrowed.submit_turn(t)
    assert len(_drain(borrowed)) == 4 and borrowed.counters["serving_steps"] > 0
    for t, ref in zip(turns, reference, strict=True):
        assert t.output_ids == ref.token_ids and t.logprobs == ref.logprobs  # bitwise

    (ref,) = _engine(2).generate(prompts[:1], params[:1])  # alone: a batch of one, as the turns below run
    preempted = _executor(memory_tokens=40)
    turn = Turn("p.0", "p", prompts[0], 10, params=params[0])  # reserves 5 + 10 = 15 tokens
    preempted.submit_turn(turn)
    for _ in range(3):
        preempted.poll()
    _serve(preempted, 2, max_tokens=10)  # serving reserves 2 x 14 = 28: 28 + 15 > 40
    preempted.poll()
    assert preempted.counters["preemptions"] == 1 and len(turn.output_ids) == 3
    assert _drain(preempted) == [turn]

    borrowed, dedicated = _executor(name="bor"), _executor(serving=False, name="ded")
    migrated = Turn("m.0", "m", prompts[0], 10, params=params[0])
    borrowed.submit_turn(migrated)
    for _ in range(3):
        borrowed.poll()
    assert borrowed.withdraw() == [migrated] and len(migrated.output_ids) == 3
    dedicated.submit_turn(migrated)
    assert _drain(dedicated) == [migrated] and migrated.workers == ["bor", "ded"]

    for resumed in (turn, migrated):
        assert resumed.output_ids == ref.token_ids
        assert resumed.logprobs[:3] == ref.logprobs[:3]
        assert resumed.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


class TickClock:
    """Advances ``tick`` seconds on every read: every engine step the executor times measures exactly ``tick``."""

    def __init__(self, tick: float) -> None:
        self.t, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t


def _cold_executor(clock: TickClock) -> CoServingExecutor:
    """The bench's set-up: an SLO of 60 ms TTFT / 12 ms TPOT (1.5 x a serving-alone p99), untrained latency models."""
    return CoServingExecutor(
        _engine(1), _engine(2), SLOConfig(ttft_p99_ms=60.0, tpot_p99_ms=12.0), margin=0.2, clock=clock
    )


def test_a_cold_rollout_model_refuses_every_step_and_calibration_lends_the_idle_replica() -> None:
    clock = TickClock(0.001)
    ex = _cold_executor(clock)
    # cold: the prior predicts 50 ms x (1 + 1/8) = 56.25 ms for one decode, over the TTFT budget 0.8 x 60 = 48 ms,
    # so even an idle replica admits nothing, no rollout step runs, and the model never learns (never lent)
    assert ex.rollout_model.predict(StepShape(decodes=1)) == pytest.approx(0.05625)
    assert ex.capacity(limit=8) == 0
    steps = ex.calibrate(prompt_tokens=64)
    # each engine: prefills of 16, 32 and 64 tokens, then decode batches of 2, 4 and 8 (max_num_seqs 8), each
    # request 4 tokens: one prefill step and 3 decode steps per shape, each shape run twice
    assert steps == {"serving": 2 * 6 * 4, "rollout": 2 * 6 * 4}
    # every step measured 1 ms: the fit is 1 ms per step whatever its shape
    for model in (ex.serving_model, ex.rollout_model):
        assert model.fitted
        assert model.predict(StepShape(decodes=8, prefill_tokens=64, context_tokens=512)) == pytest.approx(
            0.001, abs=1e-6
        )
    # idle serving: a rollout step of 1 ms plus an arriving request's 1 ms prefill fit 48 ms at any batch
    assert ex.capacity(limit=8) == 8
    assert ex.rollout_model.samples == 24 and ex.counters["rollout_steps"] == 0  # calibration is not rollout work
    # regression: before any serving request the arrival budget was 0 prompt tokens (none budgeted for the first
    # long prompts); it starts at the longest prompt serving may send, and serving's own prompts replace it
    assert ex.serving_state(clock()).arrival_prefill_tokens == 64
    for i in range(64):
        ex.submit_serving(ServingRequest(f"s{i}", 0.0, [1, 2, 3], 1))
    ex.poll()
    assert ex.serving_state(clock()).arrival_prefill_tokens == 3


def test_calibration_draws_no_sampling_randomness_and_refuses_a_busy_executor() -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8)  # no seed: the engine's own generator
    calibrated = _cold_executor(TickClock(0.001))
    calibrated.calibrate(prompt_tokens=32)
    assert calibrated.rollout is not None
    fresh = _engine(2)
    out = []
    for engine in (calibrated.rollout, fresh):
        engine.add_request([3, 4, 5, 6], params, request_id="r")
        done = []
        while engine.has_unfinished():
            done += engine.step()
        out.append(done[0].token_ids)
    assert out[0] == out[1]
    busy = _cold_executor(TickClock(0.001))
    busy.submit_turn(_turns(1)[0])
    with pytest.raises(ValueError, match="calibrate before"):
        busy.calibrate(prompt_tokens=32)


class TwoSpeedClock:
    """Each calibration shape runs twice, 4 steps of 2 clock reads each: the first run's steps measure 3 ms, the
    second's 1 ms (``slow`` s per read for 8 reads, then ``fast`` for 8, and so on)."""

    def __init__(self, slow: float, fast: float) -> None:
        self.t, self.reads, self.slow, self.fast = 0.0, 0, slow, fast

    def __call__(self) -> float:
        self.t += self.slow if (self.reads // 8) % 2 == 0 else self.fast
        self.reads += 1
        return self.t


def test_calibration_keeps_each_steps_fastest_run() -> None:
    ex = _cold_executor(TwoSpeedClock(slow=0.003, fast=0.001))
    ex.calibrate(prompt_tokens=64)
    # a step's time is the tick of the read that ends it: 3 ms in the first run of each shape, 1 ms in the second;
    # fed at its fastest every step is 1 ms (the mean, 2 ms, would be an over-prediction nothing corrects)
    for model in (ex.serving_model, ex.rollout_model):
        assert model.samples == 6 * 4
        assert model.predict(StepShape(decodes=4, prefill_tokens=32, context_tokens=64)) == pytest.approx(
            0.001, abs=1e-6
        )


def test_a_batch_the_guard_refuses_whole_decodes_what_it_admits_and_preempts_the_newest() -> None:
    """Regression: the running batch was all or nothing, so when serving load admitted 2 of 3 decodes every
    turn here stalled (its trajectory with it) while ``capacity()`` told the router 2 could run."""
    ex = _executor()
    turns = _turns(3, max_tokens=8)
    for t in turns:
        ex.submit_turn(t)
    ex.poll()  # 3 running turns, one token each
    assert len(ex.rollout.scheduler.running) == 3
    _serve(ex, 3, max_tokens=8)  # 3 serving decodes: 12 ms; + 3 rollout 6 ms > 16 ms, + 2 rollout 4 ms fits
    steps = ex.counters["rollout_steps"]
    ex.poll()  # serving prefills its 3 requests, then the rollout step is judged next to their decodes
    assert ex.counters["rollout_steps"] == steps + 1  # a step ran: no pause
    assert ex.counters["pauses"] == 0
    assert ex.counters["preempted_for_slo"] == 1 and ex.counters["preemptions"] == 1
    assert turns[2].preemptions == 1 and turns[0].preemptions == turns[1].preemptions == 0  # the newest
    assert len(ex.rollout.scheduler.running) == 2 and ex.capacity() == 2  # what runs is what capacity says
    assert len(turns[2].output_ids) >= 1 and len(turns[2].token_versions) == len(turns[2].output_ids)  # kept
    ex.poll()  # serving still decodes 3: the preempted turn is not admitted again only to be preempted
    assert ex.counters["preempted_for_slo"] == 1 and len(ex.rollout.scheduler.running) == 2
    done = _drain(ex)
    assert sorted(t.turn_id for t in done) == ["t0.0", "t1.0", "t2.0"]
    assert all(len(t.output_ids) == 8 and len(t.logprobs) == 8 for t in done)


class _SlowEngine(LLMEngine):
    """An engine whose every step takes ``seconds`` on the test's clock (the executor's clock)."""

    def __init__(self, seed: int, clock: Clock, seconds: float) -> None:
        model, _ = nano_policy(seed)
        super().__init__(model, EngineConfig(max_num_seqs=8, prefix_cache_tokens=4096, seed=seed))
        self.clock, self.seconds = clock, seconds

    def step(self):  # type: ignore[no-untyped-def]
        self.clock.t += self.seconds
        return super().step()


def test_a_request_that_arrives_during_the_serving_step_is_waiting_when_the_guard_decides() -> None:
    """Regression: arrivals were handed to serving only at the start of a poll, so one that arrived during the
    serving step was invisible to the guard, which then admitted a rollout step that request had to wait for on
    top of the time it had already waited."""
    clock = Clock()
    ex = CoServingExecutor(
        _SlowEngine(1, clock, 0.030),  # every serving step takes 30 ms
        _engine(2),
        SLOConfig(ttft_p99_ms=50.0, tpot_p99_ms=1000.0),  # a TTFT budget of 40 ms with the 0.2 margin
        margin=0.2,
        clock=clock,
    )
    ex.serving_model = FixedModel(0.004, 0.0)
    ex.rollout_model = FixedModel(0.002, 0.0)
    turns = _turns(8, max_tokens=30)
    for t in turns:
        ex.submit_turn(t)
    ex.poll()  # serving idle: all 8 turns run
    assert len(ex.rollout.scheduler.running) == 8
    a, b = random_prompts([4, 4], seed=11)
    ex.submit_serving(ServingRequest("a", 0.001, a, 4))
    ex.submit_serving(ServingRequest("b", 0.010, b, 4))  # arrives while serving prefills "a"
    clock.t = 0.001
    ex.poll()  # serving step to 31 ms; then "b" has waited 21 ms: 21 + 2 k (rollout) + 8 (serving) <= 40 ms
    assert [r.request_id for r in ex.serving.scheduler.waiting] == ["b"]
    assert ex.counters["preempted_for_slo"] == 3 and len(ex.rollout.scheduler.running) == 5


class _RecordingModel(FixedModel):
    """A fixed model that also keeps every observation it is fed."""

    def __init__(self, per_decode: float, per_token: float) -> None:
        super().__init__(per_decode, per_token)
        self.seen: list[tuple[StepShape, float]] = []

    def observe(self, shape: StepShape, seconds: float) -> None:
        self.seen.append((shape, seconds))


def test_the_rollout_model_is_fed_the_step_and_the_loop_time_after_it() -> None:
    """Regression: the model saw only the engine step, not the replica's loop time that follows it (answering the
    router), which a serving request arriving then waits for too."""
    ex = _executor()
    model = _RecordingModel(0.002, 0.0)
    ex.rollout_model = model
    for t in _turns(2, max_tokens=8):
        ex.submit_turn(t)
    clock = ex.clock
    assert isinstance(clock, Clock)
    ex.poll()  # one rollout step; the fake clock does not move during it: its engine time is 0
    assert model.seen == []  # observed at the next poll, with what came between
    clock.t += 0.007  # the caller's loop: 7 ms before it polls again
    ex.poll()
    (shape, seconds), *_ = model.seen
    assert shape.decodes == 0 and shape.prefill_tokens > 0  # the first step prefilled both turns
    assert seconds == pytest.approx(0.007)
    assert ex.counters["loop_gap_ms"] == 7


def test_each_served_request_carries_the_rollout_time_that_ran_during_its_life() -> None:
    """Real clock (the engines time their requests with it); only how measured intervals relate is asserted."""
    ex = CoServingExecutor(_engine(1), _engine(2), SLOConfig(ttft_p99_ms=1000.0, tpot_p99_ms=1000.0), margin=0.2)
    ex.serving_model = FixedModel(0.0, 0.0)
    ex.rollout_model = FixedModel(0.0, 0.0)  # the guard admits every rollout step
    ex.submit_serving(ServingRequest("s0", ex.clock(), random_prompts([4], seed=3)[0], 6))
    alone: list[RequestTiming] = []
    while not ex.serving_idle():
        alone += ex.poll().served
    assert [(t.rollout_before_first_s, t.rollout_after_first_s) for t in alone] == [(0.0, 0.0)]
    assert alone[0].serving_before_first_s > 0.0 and alone[0].serving_after_first_s > 0.0  # its own steps
    for turn in _turns(4, max_tokens=40):
        ex.submit_turn(turn)
    ex.poll()  # rollout is running before the request arrives
    ex.submit_serving(ServingRequest("s1", ex.clock(), random_prompts([4], seed=4)[0], 6))
    beside: list[RequestTiming] = []
    while not ex.serving_idle():
        beside += ex.poll().served
    (timing,) = beside
    assert timing.rollout_after_first_s > 0.0  # a rollout step ran between each of its decode steps
    rollout = timing.rollout_before_first_s + timing.rollout_after_first_s
    serving = timing.serving_before_first_s + timing.serving_after_first_s
    assert serving > 0.0 and rollout + serving <= timing.finish_s - timing.arrival_s  # disjoint parts of its life


def test_serving_steps_are_timed_apart_after_a_rollout_step_and_after_a_serving_step() -> None:
    """Each timed step reads the tick clock twice, so it measures exactly 1 ms; the fixed model predicts 4 ms a
    decode and nothing for a prefill. The first serving step follows no step and is counted in neither."""
    ex = CoServingExecutor(
        _engine(1), _engine(2), SLOConfig(ttft_p99_ms=1000.0, tpot_p99_ms=1000.0), margin=0.2, clock=TickClock(0.001)
    )
    ex.serving_model = FixedModel(0.004, 0.0)
    ex.rollout_model = FixedModel(0.0, 0.0)
    c = ex.counters
    _serve(ex, 1, max_tokens=4)  # a prefill step, then three steps of one decode each
    while not ex.serving_idle():
        ex.poll()
    assert c["serving_steps"] == 4
    assert (c["serving_after_serving_steps"], c["serving_after_serving_us"]) == (3, 3000)
    assert c["serving_after_serving_predicted_us"] == 3 * 4000
    assert c["serving_after_rollout_steps"] == 0
    for turn in _turns(2, max_tokens=8):
        ex.submit_turn(turn)
    ex.poll()  # serving is idle: a rollout step only
    assert c["rollout_steps"] == 1 and c["serving_steps"] == 4
    _serve(ex, 1, max_tokens=4, start=1)
    ex.poll()  # its prefill, right after the rollout step
    assert (c["serving_after_rollout_steps"], c["serving_after_rollout_us"]) == (1, 1000)
    assert c["serving_after_rollout_predicted_us"] == 0
    assert ex.aftermath.samples == 1 and ex.aftermath.measured_s == pytest.approx(0.001)  # only that step


@pytest.mark.parametrize("budget_aftermath", [True, False])
def test_the_guard_budgets_the_serving_step_after_rollout_at_its_measured_ratio(budget_aftermath: bool) -> None:
    """3 serving decodes predicted 12 ms; rollout 2 ms a decode; TPOT budget 0.8 x 20 = 16 ms: 2 rollout decodes
    fit. Serving steps after rollout steps that ran 1.25x their prediction make it 15 ms: none fits."""
    ex = _executor()
    ex.budget_aftermath = budget_aftermath
    for turn in _turns(3, max_tokens=8):
        ex.submit_turn(turn)
    ex.poll()
    _serve(ex, 3, max_tokens=8)
    ex.poll()  # serving prefills; 3 serving requests now decode
    assert ex.capacity() == 2
    for _ in range(ex.aftermath.min_samples):
        ex.aftermath.observe(0.015, 0.012)
    assert ex.capacity() == (0 if budget_aftermath else 2)


class _SlowReadClock:
    """``time.perf_counter`` that sleeps before each read, as a descheduled executor thread would: reads after a
    step then land well past the engine's own finish times."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __call__(self) -> float:
        time.sleep(self.sleep_s)
        return time.perf_counter()


def test_a_one_step_request_gets_its_step_as_serving_time_however_late_the_clock_is_read_after_it() -> None:
    """Regression (CI, test_rose_setups): the serving span ended at a clock read taken after the step, so a request
    that arrived in a gap and finished in one step could lie wholly before its shifted span: serving time 0."""
    ex = CoServingExecutor(
        _engine(1), _engine(2), SLOConfig(ttft_p99_ms=1e6, tpot_p99_ms=1e6), margin=0.2, clock=_SlowReadClock(0.05)
    )
    ex.serving_model = FixedModel(0.0, 0.0)
    ex.rollout_model = FixedModel(0.0, 0.0)
    ex.submit_serving(ServingRequest("s0", time.perf_counter(), random_prompts([4], seed=3)[0], 1))
    served: list[RequestTiming] = []
    while not ex.serving_idle():
        served += ex.poll().served
    (timing,) = served
    assert timing.output_tokens == 1
    # its one step began after it arrived and it finished inside that step: all of [start, finish] was serving
    assert 0.0 < timing.serving_before_first_s + timing.serving_after_first_s <= timing.finish_s - timing.arrival_s
