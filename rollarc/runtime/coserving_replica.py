"""CoServingReplica: a serving deployment that lends its idle time to the policy's rollouts (a Ray async actor).

It hosts the serving engine S (another model than the policy), replaying a serving trace in a loop, and a
rollout engine R holding the policy, both driven by one :class:`~rollarc.rose.coserve.CoServingExecutor`:
serving first, a rollout step only when the SLO guard admits it, rollout turns paused or preempted on a burst.

To the router it is a rollout replica (:class:`~rollarc.runtime.replica_protocol.RolloutReplica`): the driver registers it in the ``borrowed`` pool while it reports headroom and removes it
(drain, then abort; the agent loops resume the aborted turns elsewhere from their partial output) when serving
load rises. Every token keeps the policy version that produced it.

The SLO: the run's, pushed by the driver (``set_slo``) before the replica may be lent; until then it reports no
headroom and takes no turn. With ``harvest.slo_source: calibrate`` the requests of its first ``calibration_s`` of
serving, with nothing lent (the run trains meanwhile), are the sample the SLO is derived from (``serve_alone``); they are kept
apart from the requests scored against that SLO (``stats``, ``served_timings``).

Weights: it is another site, whose members hold the weights in shards (``rollarc.sync.site``). ``relay``
receives one shard's update, forwards it to its children in that shard's fan-out route, applies it, and reports
each hop's bytes; once every shard is at the new version, the whole weights go into the rollout engine. A shard
that fell behind catches up from the trainer (a delta chain or a full copy), and that is reported too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import ray
import torch
from ray.exceptions import RayActorError

from rollarc.config.harvest import HarvestConfig
from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import Completion, EngineDeadError, SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.models.device import resolve_device, resolve_dtype
from rollarc.policy.dispatcher import BORROWED_POOL
from rollarc.policy.in_flight import plan_update
from rollarc.rose.coserve import CoServingExecutor, ServingRequest
from rollarc.rose.pinning import pin
from rollarc.rose.serving_model import engine_of
from rollarc.rose.slo import RequestTiming, SLOConfig, latencies, summarize
from rollarc.rose.trace import TraceRequest
from rollarc.rose.trace_loop import TraceLoop, harvest_trace
from rollarc.rose.turns import Turn
from rollarc.runtime.gc_pauses import GCPauses
from rollarc.runtime.replica_log import ReplicaLog
from rollarc.runtime.replica_protocol import CatchUp
from rollarc.runtime.router import TurnArgs
from rollarc.runtime.site_relay import apply_shard, relay_shard
from rollarc.runtime.sync_report import sync_timings
from rollarc.runtime.turn_chunks import TurnChunk, chunks_as_completed
from rollarc.runtime.weight_sync import ShardPayload, SyncPayload, engine_state, receive
from rollarc.serve.weights import state_digest
from rollarc.sync.config import SyncConfig
from rollarc.sync.shard import ShardSpec
from rollarc.sync.site import SiteReceiver
from rollarc.sync.topology import Route
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher, updates_nbytes

LOOKAHEAD_S = 0.5  # serving requests are queued this far ahead of their arrival (the executor admits them on time)
IDLE_SLEEP_S = 0.002
TURN_TOKENS_PRIOR = 64.0  # the reservation assumed for a rollout turn before any has arrived


@ray.remote
class CoServingReplica:
    def __init__(
        self,
        name: str,
        policy_dir: str,
        engine_cfg: EngineConfig,
        harvest: HarvestConfig,
        in_flight_update: str,
        version: int | None,
        sync_cfg: SyncConfig,
        trainer: Any,
        dtype: str = "float32",
        seed: int = 0,
        layouts: tuple[ShardSpec, ...] = (WHOLE,),
        trace: list[TraceRequest] | None = None,
        cores: list[int] | None = None,
        device: str = "cpu",
    ) -> None:
        """``version`` None: a replacement started mid-run; it must ``catch_up`` (a full copy) before it is lent.

        ``layouts``: the site's shard layouts (``TrainWorker.register_site``); the replica holds every one.
        ``trace``: a window to replay once instead of ``harvest``'s trace in a loop, and ``cores``: the CPU cores
        to pin this actor to (``rose.pinning``); ``rollarc bench rose`` passes both, so that every set-up serves
        the same requests on the same cores. ``device``: ``model.device``; the serving model S and the policy both
        live there, sharing the device and ``harvest.memory_tokens`` of KV (serving first).
        """
        torch.set_num_threads(harvest.threads)
        self.pinned = pin(cores) if cores else []
        self.name = name
        self.harvest = harvest
        self.update_plan = plan_update(in_flight_update)
        self.trainer = trainer
        model, _ = load_policy(policy_dir)
        start = WeightPublisher(
            sync_cfg
        )  # the receiver's copy starts bit-identical to the trainer's (as RolloutWorker)
        start.publish(model.state_dict(), version=version or 0)
        self.site = SiteReceiver(layouts, start.shard(WHOLE), version)
        self._engine_at = version  # the version whose weights the rollout engine holds (None: the checkpoint's)
        self._swapping = asyncio.Lock()
        self.device = resolve_device(device)
        model = model.to(self.device, resolve_dtype(dtype))  # type: ignore[arg-type]  # transformers' typed .to rejects a device
        self._engine_like = dict(model.state_dict())
        rollout = LLMEngine(model, engine_cfg.model_copy(update={"num_threads": None}))
        rollout.version = version or 0
        self.max_turns = engine_cfg.max_num_seqs
        self.executor = CoServingExecutor(
            engine_of(harvest.serving, self.device),
            rollout,
            harvest.slo,
            margin=harvest.margin,
            memory_tokens=harvest.memory_tokens,
            budget_aftermath=harvest.budget_aftermath,
            name=name,
        )
        # both latency models fitted before serving starts: a cold rollout model would refuse every step
        self.calibration = self.executor.calibrate(harvest.replay.max_prompt_tokens)
        self.trace = (
            TraceLoop(harvest_trace(harvest), harvest.replay.duration_s)
            if trace is None
            else TraceLoop(trace, harvest.replay.duration_s, laps=1)
        )
        self.rng = random.Random(seed)
        self.timings: deque[RequestTiming] = deque(maxlen=100_000)  # served, after the calibration's sample if any
        self._calibration_s: float | None = None  # start()'s
        self._calibration_end: float | None = None  # requests arriving before this are the serving-alone sample
        self._calibration_due = 0  # of those, handed to the executor so far
        self._handed_until = 0.0  # every request arriving before this time has been handed to the executor
        self.calibration_timings: list[RequestTiming] = []  # ... and finished
        self.waiting: dict[str, tuple[asyncio.Future[Turn], float]] = {}  # turn id -> (its future, arrival)
        self.gate = asyncio.Event()
        self.gate.set()
        self.migrated = 0  # turns handed back by abort_all (the router re-routes them)
        self.migrated_kept = 0  # of those, the turns handed back with partial output (the agent loop resumes them)
        self.migrated_kept_tokens = 0  # the tokens they carried: what regenerating from scratch would have redone
        self.served = 0
        self._task: asyncio.Task[None] | None = None
        self._requests = 0
        self.turn_tokens = TURN_TOKENS_PRIOR  # KV a rollout turn reserves (prompt + max tokens), a running mean
        self.log = ReplicaLog(name, BORROWED_POOL, role=BORROWED_POOL)  # spans since the driver last drained them
        self.gc_pauses = GCPauses()  # serving steps stall for them too (bench rose reports them)

    # ---- the loop ------------------------------------------------------------------------------------
    async def start(self, calibration_s: float | None = None) -> str:
        """Start replaying the trace and serving (idempotent). ``calibration_s``: the requests arriving in the first
        ``calibration_s`` of the replay are the serving-alone sample (``serve_alone``)."""
        if self._task is None:
            self._calibration_s = calibration_s
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self.name

    async def _loop(self) -> None:
        try:
            await self._serve()
        finally:  # the loop failed (or the actor is going away): nobody would ever finish the waiting turns
            for future, _ in self.waiting.values():
                if not future.done():
                    future.set_exception(RuntimeError(f"co-serving replica {self.name}: its serving loop stopped"))

    async def _serve(self) -> None:
        t0 = time.perf_counter()
        if self._calibration_s is not None:
            self._calibration_end = t0 + self._calibration_s
        vocab = self.harvest.serving.vocab_size
        while True:
            now = time.perf_counter()
            self._handed_until = now + LOOKAHEAD_S  # every request arriving before this is handed to the executor
            for r in self.trace.until(now - t0 + LOOKAHEAD_S):
                prompt = [self.rng.randrange(1, vocab) for _ in range(r.prompt_tokens)]
                self.executor.submit_serving(
                    ServingRequest(f"s{self._requests}", t0 + r.arrival_s, prompt, r.output_tokens)
                )
                self._requests += 1
                self._calibration_due += self._in_calibration(t0 + r.arrival_s)
            result = self.executor.poll()
            for timing in result.served:
                (self.calibration_timings if self._in_calibration(timing.arrival_s) else self.timings).append(timing)
            self.served += len(result.served)
            for turn in result.turns:
                self._resolve(turn)
            await asyncio.sleep(0 if result.worked else IDLE_SLEEP_S)

    def _in_calibration(self, arrival: float) -> bool:
        return self._calibration_end is not None and arrival < self._calibration_end

    # ---- the SLO ------------------------------------------------------------------------------------
    async def serve_alone(self) -> list[tuple[float, float | None]]:
        """The serving-alone calibration: the requests arriving in the first ``calibration_s`` (``start``'s) of the
        trace replay, each (TTFT ms, TPOT ms), once every one of them has finished. Called before the replica is ever
        lent, so no rollout turn runs beside them; the caller bounds the wait (``HarvestPool``)."""
        if self._calibration_s is None:
            raise RuntimeError(f"co-serving replica {self.name}: serve_alone, but start() was given no calibration_s")
        while self._calibration_end is None:  # the loop sets it when it first runs
            self._check_loop()
            await asyncio.sleep(IDLE_SLEEP_S)
        if self.executor.rollout_turns:
            raise RuntimeError(f"co-serving replica {self.name}: serve_alone with rollout turns here")
        while (
            time.perf_counter() < self._calibration_end
            or self._handed_until < self._calibration_end  # some of the sample not handed over yet
            or len(self.calibration_timings) < self._calibration_due
        ):
            self._check_loop()
            await asyncio.sleep(0.01)
        return latencies(self.calibration_timings)

    def set_slo(self, ttft_p99_ms: float, tpot_p99_ms: float) -> dict[str, float]:
        """The SLO the guard keeps from now on (the run's derived or fixed one); returns what the guard holds."""
        self.executor.slo = SLOConfig(ttft_p99_ms=ttft_p99_ms, tpot_p99_ms=tpot_p99_ms)
        return self.executor.slo.model_dump()

    def _check_loop(self) -> None:
        if self._task is not None and self._task.done() and self._task.exception() is not None:
            raise RuntimeError(f"co-serving replica {self.name}: its serving loop failed") from self._task.exception()

    def _resolve(self, turn: Turn) -> None:
        entry = self.waiting.pop(turn.turn_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(turn)

    # ---- the rollout data path (the router's replica interface) ----------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cache_key: str | None = None,
        task: str | None = None,
        step: int | None = None,
    ) -> Completion:
        await self.gate.wait()
        self._check_loop()
        t0 = time.perf_counter()
        batch = self.executor.rollout_turns
        turn_id = uuid.uuid4().hex
        future: asyncio.Future[Turn] = asyncio.get_running_loop().create_future()
        self.waiting[turn_id] = (future, t0)
        self.turn_tokens = 0.9 * self.turn_tokens + 0.1 * (len(prompt_ids) + params.max_tokens)
        self.executor.submit_turn(
            Turn(turn_id, cache_key or turn_id, list(prompt_ids), params.max_tokens, params=params)
        )
        try:
            turn = await future
        except asyncio.CancelledError:
            self.waiting.pop(turn_id, None)
            self.executor.cancel(turn_id)
            raise
        completion = self._completion(turn, t0)
        self.log.turn(completion, t0, time.perf_counter(), cache_key, task, step, batch)
        return completion

    async def generate_batch(self, turns: list[TurnArgs]) -> AsyncIterator[TurnChunk]:
        """``generate`` for many turns at once, streamed back in chunks of the turns finished so far (the router's
        batch path, ``rollarc.runtime.turn_chunks``)."""
        tasks = [asyncio.ensure_future(self.generate(*turn)) for turn in turns]
        try:
            async for chunk in chunks_as_completed(tasks):
                yield chunk
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()

    def _completion(self, turn: Turn, t0: float) -> Completion:
        aborted = turn.finish_reason is None  # handed back unfinished (withdrawn, or an abort for a weight update)
        return Completion(
            request_id=turn.turn_id,
            prompt_len=len(turn.prompt_ids),
            token_ids=list(turn.output_ids),
            logprobs=list(turn.logprobs),
            token_versions=list(turn.token_versions),
            version=min(turn.token_versions, default=self.executor.rollout.version if self.executor.rollout else 0),
            finish_reason="abort" if aborted else turn.finish_reason or "length",
            error=turn.error,
            arrival_time=t0,
            finish_time=time.perf_counter(),
        )

    async def abort_all(self) -> int:
        """Hand every rollout turn back unfinished (withdrawal) with its partial output, log-probs and versions: the
        agent loops resume them on another replica from where they stopped (``rollarc.agent.turn``)."""
        turns = self.executor.withdraw()
        for turn in turns:
            self._resolve(turn)
        self.migrated += len(turns)
        self.migrated_kept += sum(1 for turn in turns if turn.output_ids)
        self.migrated_kept_tokens += sum(len(turn.output_ids) for turn in turns)
        return len(turns)

    async def abort_key(self, cache_key: str) -> int:
        """Abort the turns of a cancelled trajectory."""
        cancelled = 0
        for held in [t for t in self.executor.turns() if t.traj_id == cache_key]:
            turn = self.executor.cancel(held.turn_id)
            if turn is not None:
                self._resolve(turn)
                cancelled += 1
        return cancelled

    # ---- headroom and stats ---------------------------------------------------------------------------
    def headroom(self, spans: bool = False) -> dict[str, Any]:
        """What the driver lends from: the rollout turns the guard admits now, and the executor's counters.

        ``spans``: also hand over the generate spans since the last call (``drain_spans``), so a replica that is
        killed loses at most one poll's worth of its timeline.
        """
        self._check_loop()
        return {
            **({"spans": self.drain_spans()} if spans else {}),
            "capacity": self.executor.capacity(limit=self.max_turns, turn_tokens=max(1, round(self.turn_tokens))),
            "counters": {
                **self.executor.counters,
                "migrated": self.migrated,
                "migrated_kept": self.migrated_kept,
                "migrated_kept_tokens": self.migrated_kept_tokens,
                "served": self.served,
                "serving_requests": self._requests,  # handed to the executor so far; minus served: not finished
                **self.gc_pauses.counters(),
            },
            "version": self.site.version,
            "turns": self.executor.rollout_turns,
        }

    def stats(self) -> dict[str, Any]:
        """Serving SLO over every request served so far, and the co-serving counters."""
        slo = self.executor.slo
        return {
            "name": self.name,
            "device": str(self.device),
            "slo": slo.model_dump() if slo is not None else None,  # what the guard holds
            "calibration_requests": len(self.calibration_timings),  # its serving-alone sample (0: none measured here)
            "pinned": self.pinned,  # the cores it runs on (harvest.cores), [] if not pinned
            "serving": summarize(list(self.timings), slo) if slo is not None else None,
            "running": self.executor.rollout_turns,
            "generated_tokens": self.log.generated_tokens,
            "prompt_tokens": self.log.prompt_tokens,
            **self.headroom(),
        }

    def served_timings(self) -> dict[str, Any]:
        """Every serving request finished so far, as :class:`RequestTiming` fields (arrival, first token and finish on
        this actor's clock, output tokens, the rollout time before and after its first token), the cores it is
        pinned to, and the latency models' coefficients (``rollarc bench rose``)."""
        self._check_loop()
        ex = self.executor
        return {
            "timings": [dataclasses.astuple(t) for t in self.timings],
            "pinned": self.pinned,
            "serving_model": ex.serving_model.coefficients() if ex.serving_model.fitted else None,
            "rollout_model": ex.rollout_model.coefficients() if ex.rollout_model.fitted else None,
        }

    def drain_spans(self) -> list[dict[str, Any]]:
        """The generate spans of the turns finished since the last call, as a RolloutWorker's (timeline.jsonl)."""
        return self.log.drain()

    async def ping(self) -> str:
        """The replica's health: raises :class:`EngineDeadError` once its serving loop (which steps both engines)
        stopped, as a built-in replica's ``ping`` does for its engine loop."""
        if self._task is not None and self._task.done():
            raise EngineDeadError(f"co-serving replica {self.name}: its serving loop stopped")
        return self.name

    # ---- weights ----------------------------------------------------------------------------------------
    async def relay(
        self, payload: ShardPayload, route: Route, handles: dict[str, Any], source: str, cross_site: bool
    ) -> list[dict[str, Any]]:
        """Receive one shard of a version, forward it down ``route`` (a new object per hop), apply it; every hop.

        Returns one record per member reached: ``source``, ``target``, ``shard`` (the layout), ``bytes`` (the
        pushed update), ``catch_up_bytes`` and ``full_copy`` (what a member whose shard fell behind fetched from
        the trainer) and ``cross_site``. A child that died is left out; the driver catches its subtree up.
        """
        (updates,) = await asyncio.gather(*payload.refs)

        def forward(child: Route) -> Any:  # a new object per hop; the call starts now (an awaitable ref)
            hop = ShardPayload(payload.version, payload.layout, [ray.put(updates)], payload.nbytes)
            return handles[child.member].relay.remote(hop, child, handles, self.name, False)

        return await relay_shard(
            self.name,
            payload.layout,
            route,
            source,
            cross_site,
            forward,
            lambda: self._apply(payload.version, payload.layout, updates),
            lost=(RayActorError,),
        )

    async def _apply(self, version: int, layout: ShardSpec, updates: tuple[VersionedUpdate, ...]) -> dict[str, Any]:
        async def fetch(have: int | None) -> tuple[VersionedUpdate, ...]:
            got: tuple[VersionedUpdate, ...] = await self.trainer.fetch_weights.remote(have, layout)
            return got

        hop, moved = await apply_shard(self.site.receivers[layout], version, updates, fetch)
        if moved:
            await self._swap_when_whole()
        return hop

    async def _swap_when_whole(self) -> None:
        """Once every shard is at one new version, put the whole weights into the rollout engine (once)."""
        async with self._swapping:
            version = self.site.version
            if version is not None and version != self._engine_at:
                await self._swap(version)
                self._engine_at = version

    async def _swap(self, version: int) -> None:
        """Put the site receiver's weights into the rollout engine, honouring ``async.in_flight_update``."""
        assert self.executor.rollout is not None
        plan = self.update_plan
        if plan.hold_new:
            self.gate.clear()
        if plan.abort_running:
            for turn in self.executor.withdraw():
                self._resolve(turn)
        try:
            while plan.drain_running and self.executor.rollout_turns:
                await asyncio.sleep(IDLE_SLEEP_S)
            self.executor.rollout.update_weights(engine_state(self.site.weights(), self._engine_like), version)
        finally:
            self.gate.set()

    async def update_weights(self, payload: SyncPayload) -> dict[str, float]:
        """A dedicated replica's update (the whole published payload, not relayed): each shard this site holds takes
        its part of ``payload`` (``SyncPayload.of``), then the whole weights go into the rollout engine."""
        t0 = time.perf_counter()
        nbytes = 0
        for layout, receiver in self.site.receivers.items():
            shard = payload.of(layout)
            (updates,) = await asyncio.gather(*shard.refs)

            async def fetch(have: int | None, layout: ShardSpec = layout) -> tuple[VersionedUpdate, ...]:
                got: tuple[VersionedUpdate, ...] = await self.trainer.fetch_weights.remote(have, layout)
                return got

            hop, _moved = await apply_shard(receiver, payload.version, updates, fetch)
            nbytes += hop["bytes"] + hop["catch_up_bytes"]
        fetched = time.perf_counter()
        await self._swap_when_whole()
        t1 = time.perf_counter()
        self.log.sync(t0, t1, payload.version)
        return sync_timings(
            fetch_s=fetched - t0, apply_s=t1 - fetched, total_s=t1 - t0, nbytes=nbytes, model_bytes=payload.model_bytes
        )

    async def catch_up(self) -> CatchUp:
        """Bring every shard up to the trainer's current version (a delta chain or a full copy, whichever is fewer
        bytes; a replacement holds no version, so full copies) and swap the whole weights in."""
        fetched: list[tuple[VersionedUpdate, ...]] = []
        for layout, receiver in self.site.receivers.items():

            async def fetch(have: int | None, layout: ShardSpec = layout) -> tuple[VersionedUpdate, ...]:
                got: tuple[VersionedUpdate, ...] = await self.trainer.fetch_weights.remote(have, layout)
                fetched.append(got)
                return got

            updates = await fetch(receiver.version)
            if updates:
                await receive(receiver, updates, fetch)
        await self._swap_when_whole()
        assert self.site.version is not None  # every shard is at the trainer's current version now
        return CatchUp(
            version=self.site.version,
            bytes=sum(updates_nbytes(u) for u in fetched),
            full_copy=any(u.full for got in fetched for u in got),
        )

    def weights_sha256(self) -> str | None:
        assert self.executor.rollout is not None
        return state_digest(self.executor.rollout.model.state_dict())

    def shutdown(self) -> None:
        """Nothing outside the actor to stop: both engines run in it."""

    def engine_weights(self) -> dict[str, torch.Tensor]:
        """The weights the rollout engine generates with, on the CPU (to check a sync bitwise)."""
        assert self.executor.rollout is not None
        return {n: t.detach().cpu().clone() for n, t in self.executor.rollout.model.state_dict().items()}
