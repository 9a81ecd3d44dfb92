"""Read a rollarc run directory (the runtime's contract) for calibration.

Fields used:

- ``config.yaml``: ``train.groups_per_step`` (B), ``train.group_size`` (G), ``train.steps``,
  ``async.max_staleness`` (k) and ``async.mode``;
- ``timeline.jsonl``: spans with ``worker``, ``role``, ``kind``, ``t0``, ``t1``, ``task``, ``traj``;
  generate spans also ``prompt_tokens``, ``new_tokens``, ``cached_tokens``, ``batch``; train spans
  ``tokens``;
- ``metrics.jsonl``: ``step`` and ``step_time_s`` per training step;
- ``task_profiles.json``: per-task measured shapes, for ``simulate --from-run``.

Every malformed line is an error that names the file and the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollarc.configio import ConfigError


@dataclass(frozen=True)
class RunRecord:
    path: Path
    groups_per_step: int
    group_size: int
    steps: int
    max_staleness: int
    spans: list[dict[str, Any]]
    step_times: list[float]

    @property
    def mode(self) -> str:
        return "sync" if self.max_staleness == 0 else f"async({self.max_staleness})"

    def spans_of(self, kind: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s.get("kind") == kind]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(f"run directory file {path} does not exist")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{number}: not valid JSON: {err}") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: expected a JSON object")
        rows.append(row)
    return rows


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
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory: {config_path} does not exist")
    config = yaml.safe_load(config_path.read_text()) or {}
    mode = _get(config, "async.mode", config_path, default="sync")
    k = int(_get(config, "async.max_staleness", config_path, default=0)) if mode == "async" else 0
    if mode not in ("sync", "async"):
        raise ConfigError(f"{config_path}: async.mode must be 'sync' or 'async', got {mode!r}")
    spans = _read_jsonl(run_dir / "timeline.jsonl")
    for number, span in enumerate(spans, start=1):
        for key in ("kind", "t0", "t1"):
            if key not in span:
                raise ConfigError(f"{run_dir / 'timeline.jsonl'}: span {number} has no {key!r}")
    metrics = _read_jsonl(run_dir / "metrics.jsonl")
    step_times = [float(m["step_time_s"]) for m in metrics if m.get("step_time_s") is not None]
    if not step_times:
        raise ConfigError(f"{run_dir / 'metrics.jsonl'}: no step_time_s recorded")
    return RunRecord(
        path=run_dir,
        groups_per_step=int(_get(config, "train.groups_per_step", config_path)),
        group_size=int(_get(config, "train.group_size", config_path)),
        steps=int(_get(config, "train.steps", config_path)),
        max_staleness=k,
        spans=spans,
        step_times=step_times,
    )


def write_run(
    run_dir: str | Path, config: dict[str, Any], spans: list[dict[str, Any]], step_times: list[float]
) -> Path:
    """Write a run directory in the same contract (the simulator's ``--timeline`` output and tests)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with (run_dir / "timeline.jsonl").open("w") as fh:
        for span in spans:
            fh.write(json.dumps(span) + "\n")
    with (run_dir / "metrics.jsonl").open("w") as fh:
        wall = 0.0
        for step, dt in enumerate(step_times):
            wall += dt
            fh.write(json.dumps({"step": step, "step_time_s": dt, "wall_s": wall}) + "\n")
    return run_dir


def read_task_profiles(run_dir: str | Path) -> dict[str, Any]:
    """``RUN_DIR/task_profiles.json`` (the runtime's online task profiles), with a clear error if absent."""
    path = Path(run_dir) / "task_profiles.json"
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist: --from-run needs a run directory written by a rollarc version "
            "that records task profiles"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
        raise ConfigError(f"{path}: expected an object with a 'tasks' mapping")
    return data
