"""The SLO a guard keeps, measured: serving alone, its p99 times a factor (docs/rose.md#the-slo-in-training).

``rollarc bench rose`` and ``rollarc train`` with ``harvest.slo_source: calibrate`` derive it the same way,
:func:`derive_slo`: ``factor`` x the p99 TTFT and TPOT of the serving-alone requests, pooled. "Alone" means with
nothing lent: in training, the requests of the run's first ``calibration_s``, served while the trainer and the
dedicated rollouts share the machine (on a machine whose cores serving shares, the SLO an idle trainer would give
is one training itself breaks). A training run records
its calibration as JSON (``harvest_calibration.json`` in the run directory) under the key it was measured with
(trace, window, serving model, device, threads), so a recorded one is reused only where it holds: on resume, or
through ``harvest.slo_file``. Pure: no Ray.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollarc.config.harvest import HarvestConfig, SLOConfig
from rollarc.config.io import ConfigError
from rollarc.rose.slo import Latency, p99s, summarize_latencies

FORMAT = "rollarc harvest calibration 1"
CALIBRATION_FILE = "harvest_calibration.json"  # in the run directory


def derive_slo(requests: Sequence[Latency], factor: float) -> SLOConfig:
    """``factor`` x the pooled p99 TTFT and TPOT of serving-alone ``requests`` (TPOT at least 1 us: a sample of
    one-token outputs has none)."""
    if not requests:
        raise ValueError("no serving-alone requests to derive the SLO from")
    ttft99, tpot99 = p99s(requests)
    return SLOConfig(ttft_p99_ms=factor * ttft99, tpot_p99_ms=factor * max(tpot99, 1e-3))


def too_few(requests: int, needed: int, calibration_s: float, replicas: int) -> str | None:
    """The one line that stops a calibration whose sample cannot give a p99, or None."""
    if requests >= needed:
        return None
    return (
        f"harvest calibration: {requests} serving requests arrived in the first {calibration_s:g} s on {replicas} "
        f"co-serving replica(s); the SLO's p99 needs at least {needed} (harvest.calibration_min_requests; at 100 one "
        "request lies above it): raise harvest.calibration_s, or give harvest.slo_source=file or fixed"
    )


def trace_identity(harvest: HarvestConfig) -> dict[str, Any]:
    """The trace a calibration served: the file's name and content hash (wherever it lies), or the synthetic one's
    settings."""
    if harvest.trace_path is None:
        return {"synthetic": harvest.synthetic.model_dump()}
    path = Path(harvest.trace_path)
    return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def calibration_key(harvest: HarvestConfig, device: str) -> dict[str, Any]:
    """What a serving-alone measurement depends on: the trace, its window and scaling, the serving model, the device
    kind and the replicas' torch threads."""
    return {
        "trace": trace_identity(harvest),
        "replay": harvest.replay.model_dump(),
        "serving": harvest.serving.model_dump(),
        "device": device,
        "threads": harvest.threads,
    }


def _differences(recorded: Any, expected: Any, at: str) -> list[str]:
    if isinstance(recorded, dict) and isinstance(expected, dict):
        return [
            d
            for name in sorted(set(recorded) | set(expected))
            for d in _differences(recorded.get(name), expected.get(name), f"{at}.{name}" if at else name)
        ]
    return [] if recorded == expected else [f"{at} {recorded!r} there, {expected!r} here"]


@dataclass(frozen=True)
class Calibration:
    """The serving-alone requests of a calibration, pooled over the replicas that served them."""

    key: dict[str, Any]
    requests: tuple[Latency, ...]
    calibration_s: float
    replicas: tuple[str, ...]

    def slo(self, factor: float) -> SLOConfig:
        return derive_slo(self.requests, factor)

    def check(self, key: dict[str, Any], where: str) -> None:
        """Refuse, in one line naming the first difference, a calibration measured under another key."""
        diff = _differences(self.key, key, "")
        if diff:
            raise ConfigError(
                f"{where} was calibrated with {diff[0]}"
                + (f" (and {len(diff) - 1} more)" if len(diff) > 1 else "")
                + ": calibrate again (harvest.slo_source=calibrate) or give a calibration of this trace, window, "
                "serving model, device and threads"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "key": self.key,
            "calibration_s": self.calibration_s,
            "replicas": list(self.replicas),
            "requests": [list(r) for r in self.requests],  # [TTFT ms, TPOT ms or null]
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Calibration:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f'{where} is not a harvest calibration (no "format": "{FORMAT}")')
        try:
            requests = tuple((float(r[0]), None if r[1] is None else float(r[1])) for r in data["requests"])
            return cls(dict(data["key"]), requests, float(data["calibration_s"]), tuple(data["replicas"]))
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise ConfigError(f"{where} is not a valid harvest calibration ({type(err).__name__}: {err})") from None


def read_calibration(path: Path) -> Calibration:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}, line {err.lineno}: not valid JSON ({err.msg})") from None
    return Calibration.from_json(data, str(path))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def serving_record(requests: Sequence[Latency], slo: SLOConfig) -> dict[str, Any]:
    """Serving requests scored against ``slo`` (summary.json's ``harvest_serving``, ``harvest_slo.alone``)."""
    scored = summarize_latencies(requests, slo)
    return {
        "requests": len(requests),
        "slo_met": bool(scored["slo_met"]) if requests else None,
        "attainment": _finite(scored["slo_attainment"]),
        "ttft_p99_ms": _finite(scored["ttft_p99_ms"]),
        "tpot_p99_ms": _finite(scored["tpot_p99_ms"]) if requests else None,
    }


def slo_record(
    slo: SLOConfig, source: str, factor: float | None, calibration: Calibration | None, **where: Any
) -> dict[str, Any]:
    """summary.json's ``harvest_slo``: the SLO every guard kept, where it came from, and the serving-alone sample it
    was derived from (``alone``, scored against it; None for a fixed SLO). ``where``: the recorded file, reused."""
    alone = None
    if calibration is not None:
        alone = {**serving_record(calibration.requests, slo), "calibration_s": calibration.calibration_s}
    return {
        "ttft_p99_ms": slo.ttft_p99_ms,
        "tpot_p99_ms": slo.tpot_p99_ms,
        "source": source,
        "factor": factor,
        "alone": alone,
        **where,
    }
