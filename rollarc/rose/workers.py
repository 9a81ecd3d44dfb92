"""ROSE worker processes: a serving worker (S only), a co-serving worker (S + borrowed rollout R) and a
dedicated rollout worker (R only), each pinned to its own cores and driven over a pipe.

Plain ``multiprocessing`` (spawn) rather than Ray: the benchmark must control which core each engine runs
on, and a pinned process per worker is the smallest thing that does. Messages, worker -> parent:
``("ready",)``, ``("done", Turn)``, ``("capacity", int)``, ``("withdrawn", [Turn])``, ``("serving_done", s)``,
``("result", dict)``; parent -> worker: ``("go",)``, ``("turn", Turn)``, ``("withdraw",)``, ``("stop",)``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.models.presets import build_model
from rollarc.rose.config import RoseConfig
from rollarc.rose.coserve import CoServingExecutor, ServingRequest
from rollarc.rose.pinning import pin
from rollarc.rose.serving_model import engine_of
from rollarc.rose.slo import RequestTiming
from rollarc.rose.trace import TraceRequest

WorkerKind = Literal["serving", "coserving", "dedicated"]
CAPACITY_EVERY_S = 0.05


@dataclass(frozen=True)
class PolicySpec:
    """The rollout policy R (the same weights on every worker: built from the same preset and seed)."""

    preset: str = "tiny"
    seed: int = 0
    vocab_size: int = 256
    max_model_len: int = 512
    max_num_seqs: int = 16


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    kind: WorkerKind
    cores: list[int]
    rose: RoseConfig
    policy: PolicySpec
    trace: list[TraceRequest] = field(default_factory=list)
    seed: int = 0


def serving_engine(rose: RoseConfig) -> LLMEngine:
    return engine_of(rose.serving)


def policy_engine(policy: PolicySpec) -> LLMEngine:
    model = build_model(policy.preset, policy.vocab_size, policy.max_model_len, seed=policy.seed)
    engine_cfg = EngineConfig(
        max_num_seqs=policy.max_num_seqs,
        max_model_len=policy.max_model_len,
        prefix_cache_tokens=policy.max_num_seqs * policy.max_model_len,
        num_threads=None,
        seed=policy.seed,
    )
    return LLMEngine(model, engine_cfg)


def serving_requests(trace: list[TraceRequest], vocab_size: int, start: float, seed: int) -> list[ServingRequest]:
    """The trace as requests with random prompt ids (a trace holds lengths only), arriving from ``start``."""
    rng = random.Random(seed)
    return [
        ServingRequest(
            f"s{i}",
            start + r.arrival_s,
            [rng.randrange(1, vocab_size) for _ in range(r.prompt_tokens)],
            r.output_tokens,
        )
        for i, r in enumerate(trace)
    ]


def build_executor(spec: WorkerSpec) -> CoServingExecutor:
    serving = serving_engine(spec.rose) if spec.kind in ("serving", "coserving") else None
    rollout = policy_engine(spec.policy) if spec.kind in ("coserving", "dedicated") else None
    return CoServingExecutor(
        serving,
        rollout,
        spec.rose.slo,
        margin=spec.rose.margin,
        memory_tokens=spec.rose.memory_tokens,
        name=spec.name,
    )


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Process entry: pin, build, wait for ``go``, then poll the executor and talk to the parent until ``stop``."""
    pinned = pin(spec.cores)
    executor = build_executor(spec)
    conn.send(("ready",))
    while conn.recv()[0] != "go":
        pass
    start = time.perf_counter()
    for request in (
        serving_requests(spec.trace, spec.rose.serving.vocab_size, start, spec.seed)
        if executor.serving is not None
        else []
    ):
        executor.submit_serving(request)
    timings: list[RequestTiming] = []
    serving_left = len(spec.trace)
    last_capacity = 0.0
    limit = spec.policy.max_num_seqs
    while True:
        stop = False
        while conn.poll():
            message = conn.recv()
            if message[0] == "turn":
                executor.submit_turn(message[1])
            elif message[0] == "withdraw":
                conn.send(("withdrawn", executor.withdraw()))
            elif message[0] == "stop":
                stop = True
        if stop:
            break
        result = executor.poll()
        for turn in result.turns:
            conn.send(("done", turn))
        if result.served:
            timings += result.served
            serving_left -= len(result.served)
            if serving_left == 0:
                conn.send(("serving_done", time.perf_counter() - start))
        now = time.perf_counter()
        if spec.kind == "coserving" and now - last_capacity >= CAPACITY_EVERY_S:
            conn.send(("capacity", executor.capacity(now, limit=limit)))
            last_capacity = now
        if not result.worked:
            next_arrival = executor.next_arrival_s()
            wait = 0.001 if next_arrival is None else min(0.001, max(0.0, next_arrival - now))
            conn.poll(wait)
    result_payload: dict[str, Any] = {
        "name": spec.name,
        "pinned": pinned,
        "timings": [(t.arrival_s, t.first_token_s, t.finish_s, t.output_tokens) for t in timings],
        "counters": dict(executor.counters),
        "serving_model": executor.serving_model.coefficients() if executor.serving_model.fitted else None,
        "rollout_model": executor.rollout_model.coefficients() if executor.rollout_model.fitted else None,
    }
    conn.send(("result", result_payload))
