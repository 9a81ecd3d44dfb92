"""The ``coserve`` section of the device check (``scripts/device_check.py``): ROSE's co-serving on one accelerator.

The serving model S and the rollout policy R live on the same device, in one
:class:`~rollarc.rose.coserve.CoServingExecutor` (what a borrowed ``CoServingReplica`` runs in ``rollarc train``
with ``harvest:``), each with its own KV budget. Three runs over the same serving requests (Poisson arrivals with
the Azure conversation trace's length shapes, scaled to the device's model):

- **serving alone**: S only; its TTFT and TPOT p99, times ``SLO_FACTOR``, is the SLO the next run must hold;
- **co-serving**: S plus a queue of rollout turns kept full, under the guard; serving attainment against that
  SLO, the guard's actions (pauses, preemptions, refusals) and the harvested rollout tokens/s;
- **rollout alone**: R only, the same turns: the tokens/s a dedicated device would give, for scale.

Direct calls, no Ray: what is measured is the executor and the guard on the device, not Ray's transport.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import SamplingParams
from rollarc.rose.calibration import derive_slo
from rollarc.rose.coserve import CoServingExecutor, ServingRequest
from rollarc.rose.slo import RequestTiming, SLOConfig, latencies, summarize
from rollarc.rose.trace import scale, synthetic_trace
from rollarc.rose.turns import Turn

SLO_FACTOR = 1.5  # the SLO co-serving must hold: this x serving alone's p99 (as rollarc bench rose derives it)
LOOSE = SLOConfig(ttft_p99_ms=1e9, tpot_p99_ms=1e9)  # serving alone is scored against nothing


def _engine(model: Any, max_num_seqs: int, max_len: int) -> LLMEngine:
    return LLMEngine(
        model,
        EngineConfig(
            max_num_seqs=max_num_seqs,
            max_model_len=max_len,
            dtype="bfloat16" if next(model.parameters()).dtype == torch.bfloat16 else "float32",
            prefix_cache_tokens=0,
            num_threads=None,
        ),
    )


def serving_requests(
    duration_s: float, rate_per_s: float, vocab: int, max_prompt: int, max_output: int, seed: int = 0
) -> list[tuple[float, list[int], int]]:
    """(arrival offset s, prompt ids, output tokens) of a Poisson trace shaped like the conversation trace."""
    trace = scale(
        synthetic_trace(duration_s, rate_per_s, seed=seed),
        token_scale=max_prompt / 1020,  # the trace's median prompt maps to max_prompt (its long tail is clipped)
        max_prompt_tokens=max_prompt,
        max_output_tokens=max_output,
        duration_s=duration_s,
    )
    generator = torch.Generator().manual_seed(seed)
    return [
        (r.arrival_s, torch.randint(1, vocab, (max(1, r.prompt_tokens),), generator=generator).tolist(),
         max(1, r.output_tokens))
        for r in trace
    ]  # fmt: skip


def _replay(
    executor: CoServingExecutor,
    requests: list[tuple[float, list[int], int]],
    duration_s: float,
    turns: int,
    turn_prompt: list[int],
    turn_tokens: int,
    sync: Any,
) -> tuple[list[RequestTiming], float]:
    """Serve ``requests`` on the wall clock while ``turns`` rollout turns stay queued; returns the timings and the
    seconds the run took (until the window ended and serving drained)."""
    start = time.perf_counter()
    for i, (offset, prompt, output) in enumerate(requests):
        executor.submit_serving(ServingRequest(f"s{i}", start + offset, prompt, output))
    submitted = 0

    def top_up() -> None:
        nonlocal submitted
        while executor.rollout is not None and executor.rollout_turns < turns:
            params = SamplingParams(temperature=1.0, max_tokens=turn_tokens, ignore_eos=True, seed=submitted)
            executor.submit_turn(Turn(f"t{submitted}", f"traj{submitted}", turn_prompt, turn_tokens, params=params))
            submitted += 1

    timings: list[RequestTiming] = []
    top_up()
    while time.perf_counter() - start < duration_s or not executor.serving_idle():
        result = executor.poll()
        timings += result.served
        top_up()
        if not result.worked:
            time.sleep(0.0005)
    sync()
    return timings, time.perf_counter() - start


def run_coserve_section(
    serving_model: Any,
    rollout_model: Any,
    *,
    vocab: int,
    duration_s: float,
    rate_per_s: float,
    max_prompt: int,
    max_output: int,
    turns: int,
    turn_tokens: int,
    memory_tokens: int,
    sync: Any,
) -> dict[str, Any]:
    requests = serving_requests(duration_s, rate_per_s, vocab, max_prompt, max_output)
    max_len = max_prompt + max(max_output, turn_tokens) + 8
    turn_prompt = torch.randint(1, vocab, (max_prompt // 2,), generator=torch.Generator().manual_seed(1)).tolist()

    def executor(serving: bool, rollout: bool, slo: SLOConfig) -> CoServingExecutor:
        """A fresh executor whose latency models are fitted on this device, as a ``CoServingReplica``'s are."""
        built = CoServingExecutor(
            _engine(serving_model, 64, max_len) if serving else None,
            _engine(rollout_model, max(turns, 1), max_len) if rollout else None,
            slo,
            memory_tokens=memory_tokens,
        )
        built.calibrate(max_prompt)
        sync()
        return built

    # warm-up: the first forwards on a device pay for kernel selection and allocation
    _replay(executor(True, True, LOOSE), requests[:4], 0.0, min(turns, 4), turn_prompt, 4, sync)
    alone_timings, _ = _replay(executor(True, False, LOOSE), requests, duration_s, 0, turn_prompt, turn_tokens, sync)
    slo = derive_slo(latencies(alone_timings), SLO_FACTOR)  # the one derivation training and bench rose use
    shared = executor(True, True, slo)
    co_timings, co_s = _replay(shared, requests, duration_s, turns, turn_prompt, turn_tokens, sync)
    dedicated = executor(False, True, slo)
    _, dedicated_s = _replay(dedicated, [], duration_s, turns, turn_prompt, turn_tokens, sync)
    alone_scored, co = summarize(alone_timings, slo), summarize(co_timings, slo)
    counters = shared.counters
    return {
        "serving_requests": len(requests),
        "rate_per_s": rate_per_s,
        "slo_ttft_p99_ms": slo.ttft_p99_ms,
        "slo_tpot_p99_ms": slo.tpot_p99_ms,
        "alone": alone_scored,
        "coserving": co,
        "slo_attainment_alone": alone_scored["slo_attainment"],
        "slo_attainment_coserving": co["slo_attainment"],
        "guard_actions": {
            k: counters[k]
            for k in ("pauses", "preemptions", "refused_tpot", "refused_ttft_waiting", "refused_ttft_arrival")
        },
        "harvested_tokens_per_s": counters["rollout_tokens"] / co_s,
        "dedicated_tokens_per_s": dedicated.counters["rollout_tokens"] / dedicated_s,
    }
