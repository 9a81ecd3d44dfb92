"""The serving SLO and how a replay is scored against it.

Per request: TTFT = first token time - arrival; TPOT = (finish - first token) / (output tokens - 1), the mean
time per output token after the first (undefined for one-token outputs, which then meet the TPOT target).
A request *attains* the SLO when its TTFT <= ``ttft_p99_ms`` and its TPOT <= ``tpot_p99_ms``; the SLO of the
deployment holds when the p99 of each is within target. Attainment = fraction of requests that attain.

On a co-serving worker each request also carries the rollout time that ran there during its life (steps and the
loop time after them, before and after its first token) and the serving steps' time; the rest of its life was
neither (the replica's event loop, the machine). :func:`misses` says which requests missed and whether they would
have missed with none of the rollout time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollarc.config.harvest import SLOConfig as SLOConfig  # re-exported: defined below rollarc.config


@dataclass(frozen=True)
class RequestTiming:
    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    rollout_before_first_s: float = 0.0  # rollout work on the same worker while it waited for its first token
    rollout_after_first_s: float = 0.0  # ... and while it decoded
    serving_before_first_s: float = 0.0  # serving steps (its own and others') while it waited for its first token
    serving_after_first_s: float = 0.0  # ... and while it decoded; the rest of its life was neither

    @property
    def ttft_ms(self) -> float:
        return 1000.0 * (self.first_token_s - self.arrival_s)

    @property
    def tpot_ms(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return 1000.0 * (self.finish_s - self.first_token_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# One request's (TTFT ms, TPOT ms); TPOT None for a one-token output. What a recorded calibration keeps per request.
Latency = tuple[float, float | None]


def latencies(timings: Sequence[RequestTiming]) -> list[Latency]:
    return [(t.ttft_ms, t.tpot_ms) for t in timings]


def attains_latency(latency: Latency, slo: SLOConfig) -> bool:
    ttft, tpot = latency
    return ttft <= slo.ttft_p99_ms and (tpot is None or tpot <= slo.tpot_p99_ms)


def attains(timing: RequestTiming, slo: SLOConfig) -> bool:
    return attains_latency((timing.ttft_ms, timing.tpot_ms), slo)


def p99s(requests: Sequence[Latency]) -> tuple[float, float]:
    """The p99 TTFT and TPOT (ms) of ``requests``: TTFT nan with none, TPOT 0 when none has two tokens."""
    tpot = [v for _, v in requests if v is not None]
    return percentile([ttft for ttft, _ in requests], 99), percentile(tpot, 99) if tpot else 0.0


def summarize_latencies(requests: Sequence[Latency], slo: SLOConfig) -> dict[str, float]:
    """p50/p99 TTFT and TPOT (ms), attainment, and whether both p99 targets hold."""
    ttft = [t for t, _ in requests]
    tpot = [v for _, v in requests if v is not None]
    ttft99, tpot99 = p99s(requests)
    return {
        "requests": float(len(requests)),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": ttft99,
        "tpot_p50_ms": percentile(tpot, 50) if tpot else 0.0,
        "tpot_p99_ms": tpot99,
        "slo_attainment": sum(attains_latency(r, slo) for r in requests) / len(requests) if requests else math.nan,
        "slo_met": float(ttft99 <= slo.ttft_p99_ms and tpot99 <= slo.tpot_p99_ms),
    }


def summarize(timings: Sequence[RequestTiming], slo: SLOConfig) -> dict[str, float]:
    """:func:`summarize_latencies` of the requests' timings."""
    return summarize_latencies(latencies(timings), slo)


def overlap_s(spans: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` covered by ``spans`` (disjoint ``(start, end)`` intervals)."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)


def misses(timings: Sequence[RequestTiming], slo: SLOConfig, keep: int = 10) -> dict[str, Any]:
    """The requests that missed the SLO: how many on TTFT and on TPOT, how many would have missed even without
    the rollout time in their life (``without_rollout``: not the guard's doing), and the first ``keep`` in detail."""
    missed = [t for t in timings if not attains(t, slo)]
    counterfactual = [
        RequestTiming(
            t.arrival_s,
            t.first_token_s - t.rollout_before_first_s,
            t.finish_s - t.rollout_before_first_s - t.rollout_after_first_s,
            t.output_tokens,
        )
        for t in missed
    ]
    return {
        "missed": len(missed),
        "ttft": sum(t.ttft_ms > slo.ttft_p99_ms for t in missed),
        "tpot": sum((v := t.tpot_ms) is not None and v > slo.tpot_p99_ms for t in missed),
        "without_rollout": sum(not attains(t, slo) for t in counterfactual),
        "detail": [
            {
                "ttft_ms": round(t.ttft_ms, 1),
                "tpot_ms": None if (v := t.tpot_ms) is None else round(v, 2),
                "output_tokens": t.output_tokens,
                "rollout_before_first_ms": round(1000 * t.rollout_before_first_s, 1),
                "rollout_after_first_ms": round(1000 * t.rollout_after_first_s, 1),
                "serving_before_first_ms": round(1000 * t.serving_before_first_s, 1),
                "serving_after_first_ms": round(1000 * t.serving_after_first_s, 1),
            }
            for t in missed[:keep]
        ],
    }
