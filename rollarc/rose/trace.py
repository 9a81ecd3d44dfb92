"""Serving traces: arrival time, prompt length and output length per request (no text).

The file format is the Azure LLM inference trace's CSV: a header ``TIMESTAMP,ContextTokens,GeneratedTokens``
and one row per request. ``TIMESTAMP`` is either a date-time (``2023-11-16 18:15:46.6805900``, seven
fractional digits allowed) or a number of seconds. Arrivals are made relative to the first row.

Replaying a real trace on a tiny model needs two knobs, which keep the shape of the load:

- ``time_scale``: arrival offsets are divided by it (``10`` replays ten times faster, a heavier load);
- ``token_scale``: prompt and output lengths are multiplied by it (and rounded, at least one token).
"""

from __future__ import annotations

import csv
import datetime as _dt
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollarc.config.io import ConfigError

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceError(ConfigError):
    """A trace file that cannot be read: the message names the file, the row and the fix (a ValueError)."""


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # seconds after the first request of the trace
    prompt_tokens: int
    output_tokens: int


def _parse_time(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    date, _, frac = text.partition(".")
    stamp = _dt.datetime.strptime(date, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.UTC).timestamp()
    return stamp + (float("0." + frac) if frac else 0.0)


def parse_rows(rows: Iterable[Sequence[str]], source: str = "trace") -> list[TraceRequest]:
    """Rows after the header -> requests sorted by arrival, arrival relative to the earliest one."""
    raw: list[tuple[float, int, int]] = []
    for number, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 3:
            raise TraceError(f"{source}: row {number} has {len(row)} columns, expected 3 ({', '.join(HEADER)})")
        try:
            t, prompt, output = _parse_time(row[0]), int(row[1]), int(row[2])
        except ValueError as err:
            raise TraceError(f"{source}: row {number} ({','.join(row)}): {err}") from None
        if prompt < 1 or output < 0 or not math.isfinite(t):
            raise TraceError(f"{source}: row {number}: ContextTokens must be >= 1 and GeneratedTokens >= 0")
        raw.append((t, prompt, output))
    if not raw:
        raise TraceError(f"{source}: no requests (expected a header {','.join(HEADER)} and at least one row)")
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0]
    return [TraceRequest(t - t0, p, o) for t, p, o in raw]


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Read a trace CSV; a missing file or a wrong header is a one-line :class:`TraceError`."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist (pass the path of a CSV with columns {','.join(HEADER)})")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = tuple(cell.strip() for cell in next(reader, []))
        if header != HEADER:
            raise TraceError(f"{path}: header is {','.join(header) or '(empty)'}, expected {','.join(HEADER)}")
        return parse_rows(reader, source=str(path))


def scale(
    trace: Sequence[TraceRequest],
    time_scale: float = 1.0,
    token_scale: float = 1.0,
    *,
    max_prompt_tokens: int | None = None,
    max_output_tokens: int | None = None,
    duration_s: float | None = None,
) -> list[TraceRequest]:
    """Compress time by ``time_scale``, scale lengths by ``token_scale``, clip lengths, keep ``duration_s`` seconds."""
    if not (time_scale > 0 and token_scale > 0):
        raise TraceError(f"time_scale and token_scale must be > 0, got {time_scale} and {token_scale}")
    out = []
    for r in trace:
        arrival = r.arrival_s / time_scale
        if duration_s is not None and arrival > duration_s:
            break
        prompt = max(1, round(r.prompt_tokens * token_scale))
        output = max(1, round(r.output_tokens * token_scale))
        if max_prompt_tokens is not None:
            prompt = min(prompt, max_prompt_tokens)
        if max_output_tokens is not None:
            output = min(output, max_output_tokens)
        out.append(TraceRequest(arrival, prompt, output))
    return out


def synthetic_trace(
    duration_s: float,
    rate_per_s: float,
    *,
    seed: int = 0,
    burst_every_s: float = 0.0,
    burst_len_s: float = 0.0,
    burst_factor: float = 1.0,
    prompt_median: int = 1020,
    output_median: int = 129,
) -> list[TraceRequest]:
    """A Poisson trace with optional periodic bursts and log-normal lengths shaped like the Azure conv trace.

    Inside a burst window (the first ``burst_len_s`` of every ``burst_every_s``) the rate is multiplied by
    ``burst_factor``. Lengths are log-normal around the given medians (the real trace's: 1020 and 129).
    """
    if duration_s <= 0 or rate_per_s <= 0:
        raise TraceError(f"synthetic trace needs duration_s > 0 and rate_per_s > 0, got {duration_s}, {rate_per_s}")
    rng = random.Random(seed)
    peak = rate_per_s * max(1.0, burst_factor)
    out: list[TraceRequest] = []
    t = 0.0
    while True:  # thinning: draw at the peak rate, keep with probability rate(t)/peak
        t += rng.expovariate(peak)
        if t > duration_s:
            return out
        in_burst = burst_every_s > 0 and (t % burst_every_s) < burst_len_s
        rate = rate_per_s * (burst_factor if in_burst else 1.0)
        if rng.random() * peak > rate:
            continue
        prompt = max(1, round(prompt_median * math.exp(rng.gauss(0.0, 0.6))))
        output = max(1, round(output_median * math.exp(rng.gauss(0.0, 0.8))))
        out.append(TraceRequest(t, prompt, output))


def write_trace(path: str | Path, trace: Sequence[TraceRequest]) -> Path:
    """Write ``trace`` in the CSV format :func:`read_trace` reads (TIMESTAMP as seconds)."""
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for r in trace:
            writer.writerow([f"{r.arrival_s:.6f}", r.prompt_tokens, r.output_tokens])
    return path
