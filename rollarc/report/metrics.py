"""Per-step metrics to ``metrics.jsonl`` and TensorBoard, and spans to ``timeline.jsonl``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import psutil


def process_rss_mb() -> float:
    """Resident memory of the calling process now (not its peak), so growth over a run shows."""

    return psutil.Process().memory_info().rss / (1 << 20)


class MetricsWriter:
    """Appends one JSON object per step; numeric values also go to TensorBoard under the same names."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, truncate_after_step: int | None = None):
        self.path = run_dir / "metrics.jsonl"
        if truncate_after_step is not None and self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= truncate_after_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # deferred: tensorboard imports torch

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, values: dict[str, Any]) -> None:
        record = {"step": step, **values}
        self._file.write(json.dumps(record, default=_jsonable) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in _flatten(values).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


class TimelineWriter:
    """Appends spans with times relative to the run start (seconds)."""

    def __init__(self, run_dir: Path, run_start: float):
        self.path = run_dir / "timeline.jsonl"
        self.run_start = run_start
        self._file = self.path.open("a")

    def write(self, spans: list[dict[str, Any]]) -> None:
        for span in spans:
            span = {**span, "t0": round(span["t0"] - self.run_start, 6), "t1": round(span["t1"] - self.run_start, 6)}
            self._file.write(json.dumps(span, default=_jsonable) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)
