"""Per-step metrics to ``metrics.jsonl``, TensorBoard and the named trackers, and spans to ``timeline.jsonl``."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import psutil

from rollarc.report.run_dir import METRICS, TIMELINE, JsonlAppender, MetricsRecord, Span, from_dict, truncate_metrics
from rollarc.report.trackers import Tracker, flatten

_process: psutil.Process | None = None


def process_rss_mb() -> float:
    """Resident memory of the calling process now (not its peak), so growth over a run shows.

    The ``psutil.Process`` is kept (building one reads ``/proc`` for the start time; workers call this every
    group and step), and built again after a fork.
    """
    global _process
    if _process is None or _process.pid != os.getpid():
        _process = psutil.Process()
    return _process.memory_info().rss / (1 << 20)


class MetricsWriter:
    """Appends one :class:`MetricsRecord` per step; numeric values also go to TensorBoard and to every tracker
    (W&B, MLflow; :mod:`rollarc.report.trackers`) under the same names."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = True,
        truncate_after_step: int | None = None,
        trackers: list[Tracker] | None = None,
    ):
        self.path = run_dir / METRICS
        self.trackers = list(trackers or [])
        if truncate_after_step is not None:
            truncate_metrics(run_dir, truncate_after_step)
        self._out = JsonlAppender(self.path)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # deferred: tensorboard imports torch

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, values: dict[str, Any]) -> None:
        self._out.append(
            [from_dict(MetricsRecord, {"step": step, **values}, f"{self.path}, step {step}", lenient=True)]
        )
        numeric = {
            key: float(value)
            for key, value in flatten(values).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        }
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        for tracker in self.trackers:
            tracker.log(step, numeric)

    def close(self) -> None:
        self._out.close()
        if self._tb is not None:
            self._tb.close()
        for tracker in self.trackers:
            tracker.close()


class TimelineWriter:
    """Appends :class:`Span` records with times relative to the run start (seconds)."""

    def __init__(self, run_dir: Path, run_start: float):
        self.path = run_dir / TIMELINE
        self.run_start = run_start
        self._out = JsonlAppender(self.path)

    def write(self, spans: list[dict[str, Any]]) -> None:
        self._out.append(
            from_dict(
                Span,
                {**span, "t0": round(span["t0"] - self.run_start, 6), "t1": round(span["t1"] - self.run_start, 6)},
                str(self.path),
                lenient=True,
            )
            for span in spans
        )

    def close(self) -> None:
        self._out.close()
