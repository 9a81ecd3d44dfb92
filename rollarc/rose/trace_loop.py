"""A serving trace replayed in a loop for as long as a training run lasts.

A co-serving replica in ``rollarc train`` serves from start-up to the end of the run, whose length is not
known in advance. :class:`TraceLoop` repeats the trace window (``replay.offset_s`` .. ``+ duration_s`` of the
scaled trace) end to end: the ``k``-th pass arrives ``k x duration_s`` later; ``rollarc bench rose`` replays it
once (``laps=1``), so every set-up serves the same requests. Pure: the caller passes times.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollarc.config.harvest import HarvestConfig
from rollarc.rose.trace import TraceRequest, read_trace, scale, synthetic_trace


def harvest_trace(cfg: HarvestConfig) -> list[TraceRequest]:
    """The window one co-serving replica replays: the trace at ``trace_path``, or the synthetic one."""
    replay = cfg.replay
    end = replay.offset_s + replay.duration_s
    if cfg.trace_path is not None:
        raw = read_trace(cfg.trace_path)
    else:
        s = cfg.synthetic
        # generated on the scaled clock's scale: the window [offset, end) after dividing by time_scale
        raw = synthetic_trace(
            end * replay.time_scale,
            s.rate_per_s,
            seed=s.seed,
            burst_every_s=s.burst_every_s,
            burst_len_s=s.burst_len_s,
            burst_factor=s.burst_factor,
        )
    scaled = scale(
        raw,
        replay.time_scale,
        replay.token_scale,
        max_prompt_tokens=replay.max_prompt_tokens,
        max_output_tokens=replay.max_output_tokens,
        duration_s=end,
    )
    return [
        TraceRequest(r.arrival_s - replay.offset_s, r.prompt_tokens, r.output_tokens)
        for r in scaled
        if r.arrival_s >= replay.offset_s
    ]


class TraceLoop:
    """Hands out the requests of an endlessly repeated window, in arrival order, up to a given time."""

    def __init__(self, window: Sequence[TraceRequest], period_s: float, laps: int | None = None) -> None:
        """``laps``: passes over the window before it runs dry (None: endless)."""
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        if laps is not None and laps < 1:
            raise ValueError(f"laps must be >= 1 or None, got {laps}")
        self.window = sorted(window, key=lambda r: r.arrival_s)
        self.period_s = period_s
        self.laps = laps
        self.index = 0  # requests handed out so far, over all passes

    def until(self, t: float) -> list[TraceRequest]:
        """The requests that arrive at or before ``t`` (seconds since the start) not yet handed out."""
        out: list[TraceRequest] = []
        if not self.window:
            return out
        while True:
            lap, i = divmod(self.index, len(self.window))
            if self.laps is not None and lap >= self.laps:
                return out
            request = self.window[i]
            arrival = lap * self.period_s + request.arrival_s
            if arrival > t:
                return out
            out.append(TraceRequest(arrival, request.prompt_tokens, request.output_tokens))
            self.index += 1
