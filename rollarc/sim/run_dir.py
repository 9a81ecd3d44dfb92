"""Read a rollarc run directory (the runtime's contract) for calibration.

Fields used:

- ``config.yaml``: ``train.groups_per_step`` (B), ``train.group_size`` (G), ``train.steps``,
  ``async.max_staleness`` (k) and ``async.mode``;
- ``timeline.jsonl``: spans with ``worker``, ``role``, ``kind``, ``t0``, ``t1``, ``task``, ``traj``;
  generate spans also ``prompt_tokens``, ``new_tokens``, ``cached_tokens``, ``batch``; train spans
  ``tokens``;
- ``metrics.jsonl``: ``step`` and ``step_time_s`` per training step;
- ``task_profiles.json``: per-task measured shapes, for ``simulate --from-run``.

The files are read through :mod:`rollarc.report.run_dir` (their schema); every malformed line is an error
that names the file and the line.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollarc.config.io import ConfigError
from rollarc.policy.scheduler import DEFAULT_MAX_OVERTAKE
from rollarc.report.run_dir import (
    CONFIG,
    METRICS,
    TIMELINE,
    MetricsRecord,
    Span,
    from_dict,
    read_metrics,
    read_task_profiles,
    read_timeline,
    write_jsonl,
)

__all__ = ["RunRecord", "load_run", "read_task_profiles", "write_run"]


@dataclass(frozen=True)
class RunRecord:
    path: Path
    groups_per_step: int
    group_size: int
    steps: int
    max_staleness: int
    spans: list[Span]
    step_times: list[float]
    max_overtake: int = DEFAULT_MAX_OVERTAKE

    @property
    def mode(self) -> str:
        return "sync" if self.max_staleness == 0 else f"async({self.max_staleness})"

    def spans_of(self, kind: str) -> list[Span]:
        return [s for s in self.spans if s.kind == kind]


def _get(config: dict[str, Any], dotted: str, path: Path, default: Any = None) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is not None:
                return default
            raise ConfigError(f"{path}: missing key {dotted}")
        node = node[part]
    return node


def load_run(run_dir: str | Path) -> RunRecord:
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG
    if not config_path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory: {config_path} does not exist")
    config = yaml.safe_load(config_path.read_text()) or {}
    mode = _get(config, "async.mode", config_path, default="sync")
    k = int(_get(config, "async.max_staleness", config_path, default=0)) if mode == "async" else 0
    if mode not in ("sync", "async"):
        raise ConfigError(f"{config_path}: async.mode must be 'sync' or 'async', got {mode!r}")
    for name in (TIMELINE, METRICS):
        if not (run_dir / name).is_file():
            raise ConfigError(f"run directory file {run_dir / name} does not exist")
    spans = read_timeline(run_dir)
    step_times = [m.step_time_s for m in read_metrics(run_dir) if m.step_time_s is not None]
    if not step_times:
        raise ConfigError(f"{run_dir / METRICS}: no step_time_s recorded")
    return RunRecord(
        path=run_dir,
        groups_per_step=int(_get(config, "train.groups_per_step", config_path)),
        group_size=int(_get(config, "train.group_size", config_path)),
        steps=int(_get(config, "train.steps", config_path)),
        max_staleness=k,
        spans=spans,
        step_times=step_times,
        max_overtake=int(_get(config, "async.max_overtake", config_path, default=DEFAULT_MAX_OVERTAKE)),
    )


def write_run(
    run_dir: str | Path, config: dict[str, Any], spans: list[dict[str, Any]], step_times: list[float]
) -> Path:
    """Write a run directory in the same contract (the simulator's ``--timeline`` output and tests)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    write_jsonl(run_dir / TIMELINE, [from_dict(Span, span, f"simulated span {i}") for i, span in enumerate(spans)])
    walls = itertools.accumulate(step_times)
    write_jsonl(
        run_dir / METRICS,
        [
            MetricsRecord(step=step, step_time_s=dt, wall_s=wall)
            for step, (dt, wall) in enumerate(zip(step_times, walls, strict=True))
        ],
    )
    return run_dir
