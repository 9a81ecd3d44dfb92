"""``rollarc loadgen --trace FILE --time-scale X --token-scale Y``: replay a serving trace against the serving model S.

The co-serving replica of ``rollarc train`` (the Ray actor ``CoServingReplica``, pinned to ``serving_cores``,
never lent: the ``alone`` set-up of ``rollarc.runtime.rose_setup``) receives the trace's requests at their scaled
arrival times, prompt ids drawn at random with the trace's lengths. Every request's TTFT and TPOT are recorded
(``--out``: one JSON object per request) and scored against ``slo:`` (from ``--config`` or the defaults);
the summary (p50/p99 TTFT and TPOT, SLO attainment) is printed as the last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rollarc.config.io import load_config
from rollarc.rose.config import RoseConfig
from rollarc.rose.slo import RequestTiming, summarize
from rollarc.rose.trace import TraceRequest, read_trace, scale
from rollarc.runtime.rose_setup import PolicySpec, rose_cluster, run_setup, write_policy


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc loadgen", description=__doc__.split("\n")[0])
    parser.add_argument("--trace", required=True, help="CSV with columns TIMESTAMP,ContextTokens,GeneratedTokens")
    parser.add_argument("--time-scale", type=float, default=None, help="arrivals X times faster (replay.time_scale)")
    parser.add_argument("--token-scale", type=float, default=None, help="lengths times Y (replay.token_scale)")
    parser.add_argument("--duration", type=float, default=None, help="seconds of scaled trace (replay.duration_s)")
    parser.add_argument("--config", default=None, help="YAML with slo:, serving:, replay: (rollarc.rose.config)")
    parser.add_argument("--out", default=None, help="write one JSON line per request (TTFT, TPOT, attained)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. slo.tpot_p99_ms=150")
    args = parser.parse_args(argv)
    rose = load_config(RoseConfig, Path(args.config) if args.config else None, args.overrides)
    replay = rose.replay.model_copy(
        update={
            k: v
            for k, v in (
                ("time_scale", args.time_scale),
                ("token_scale", args.token_scale),
                ("duration_s", args.duration),
            )
            if v is not None
        }
    )
    trace = scale(
        read_trace(args.trace),
        replay.time_scale,
        replay.token_scale,
        max_prompt_tokens=replay.max_prompt_tokens,
        max_output_tokens=replay.max_output_tokens,
    )
    window = [
        TraceRequest(r.arrival_s - replay.offset_s, r.prompt_tokens, r.output_tokens)
        for r in trace
        if replay.offset_s <= r.arrival_s <= replay.offset_s + replay.duration_s
    ]
    print(
        f"replaying {len(window)} requests over {replay.duration_s:g} s (time x{replay.time_scale:g}, "
        f"tokens x{replay.token_scale:g}) against {rose.serving.checkpoint or rose.serving.preset}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="rollarc-loadgen-") as scratch, rose_cluster():
        policy_dir, vocab = write_policy(PolicySpec(), Path(scratch))  # the replica holds a policy it never runs
        result = run_setup("alone", rose, window, policy_dir=policy_dir, vocab_size=vocab)
    if args.out:
        write_timings(Path(args.out), result.timings)
    summary = {**summarize(result.timings, rose.slo), "slo": rose.slo.model_dump(), "pinned": result.pinned["serve"]}
    print(json.dumps(summary), flush=True)
    return 0


def write_timings(path: Path, timings: list[RequestTiming]) -> None:
    """One JSON line per request, in arrival order, arrival times from the first request's."""
    origin = min((t.arrival_s for t in timings), default=0.0)
    with path.open("w") as handle:
        for t in sorted(timings, key=lambda t: t.arrival_s):
            row = {"arrival_s": t.arrival_s - origin, "ttft_ms": t.ttft_ms, "tpot_ms": t.tpot_ms}
            handle.write(json.dumps({**row, "output_tokens": t.output_tokens}) + "\n")
