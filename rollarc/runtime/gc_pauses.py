"""Python's garbage-collector pauses in this process, counted: a co-serving replica's serving steps stall for them.

A serving request on a co-serving replica can miss its SLO with no rollout step in its life (``bench rose``'s
``slo_misses``): serving steps themselves ran longer there than alone. A cyclic collection of the oldest generation
stops the event loop for as long as it walks every tracked object, and a replica that also lends its time to
rollouts allocates far more (turns, completions, spans). :class:`GCPauses` times every collection through
``gc.callbacks`` (the interpreter's own hook; nothing else reports pause lengths), so the benchmark can set the
replica's GC time against the time its requests lost.
"""

from __future__ import annotations

import gc
import time
from typing import Any


class GCPauses:
    """Installed on construction; ``counters()``: collections and milliseconds per generation, and the longest."""

    def __init__(self) -> None:
        self._started: float | None = None
        self.collections = [0, 0, 0]
        self.ms = [0.0, 0.0, 0.0]
        self.max_ms = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        pause = 1000.0 * (time.perf_counter() - self._started)
        self._started = None
        generation = int(info["generation"])
        self.collections[generation] += 1
        self.ms[generation] += pause
        self.max_ms = max(self.max_ms, pause)

    def counters(self) -> dict[str, int]:
        """Integer counters (as the executor's): ``gc_collections_genN``, ``gc_ms_genN``, ``gc_max_ms``."""
        return {
            **{f"gc_collections_gen{g}": n for g, n in enumerate(self.collections)},
            **{f"gc_ms_gen{g}": round(ms) for g, ms in enumerate(self.ms)},
            "gc_max_ms": round(self.max_ms),
        }

    def remove(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
