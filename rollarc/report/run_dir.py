"""The run directory's data files as typed records: the one place that knows their schema, for writing and reading.

``metrics.jsonl`` holds one :class:`MetricsRecord` per training step, ``timeline.jsonl`` one :class:`Span` per
unit of work, ``task_profiles.json`` one :class:`TaskProfiles` and ``summary.json`` one :class:`Summary`. The
runtime writes them through :class:`JsonlAppender` and :func:`write_json`; the report, the calibration, the
workload profiler and ``simulate --from-run`` read them through the ``read_*`` functions.

Forward compatibility: a key the schema does not name is not an error. It is kept in the record's ``extra``
and written back as it was, so an older reader still reads a newer run (and a newer writer's new metric
never stops a run). What the schema names is checked on read: a required key that is missing, or a value of
the wrong type, is a one-line :class:`RunDirError` naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from rollarc.config.io import ConfigError
from rollarc.report.disk_full_guard import run_record
from rollarc.report.durable import write_text_durably

METRICS = "metrics.jsonl"
TIMELINE = "timeline.jsonl"
TASK_PROFILES = "task_profiles.json"
SUMMARY = "summary.json"
CONFIG = "config.yaml"
CHECKPOINTS = "checkpoints"


def checkpoint_name(step: int) -> str:
    """A checkpoint's directory under ``checkpoints/`` (every kind of run names them so: ``step_000012``)."""
    return f"step_{step:06d}"


class RunDirError(ConfigError):
    """A run-directory file that does not follow its schema; the message names the file, the line and the key."""


# ---- the records -----------------------------------------------------------------------------------------
@dataclass
class Span:
    """One unit of work on one worker, in seconds since the run started (``timeline.jsonl``)."""

    kind: str  # generate | env_step | reward | train | sync | eval
    t0: float
    t1: float
    worker: str = ""  # e.g. rollout-0, env-1, train-0, controller
    role: str = ""  # rollout | borrowed (a lent co-serving replica, harvest:) | env | reward | train | controller
    step: int | None = None  # the step (policy version) the work belongs to
    version: int | None = None  # sync spans: the version published or received
    task: str | None = None  # per-trajectory spans: the task
    traj: str | None = None  # per-trajectory spans: the trajectory id
    tokens: int | None = None  # train spans: tokens in the batch
    prompt_tokens: int | None = None  # generate spans: prompt tokens of the turn
    new_tokens: int | None = None  # generate spans: tokens generated in the turn
    cached_tokens: int | None = None  # generate spans: prompt tokens the prefix cache served
    batch: int | None = None  # generate spans: sequences decoding on the replica when the turn started
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MetricsRecord:
    """One training step (``metrics.jsonl``); written by the controller after the step's weights are synced."""

    step: int  # the policy version the step produced
    version: int | None = None  # same as step
    wall_s: float | None = None  # run clock at the end of the step (continues across a resume)
    step_time_s: float | None = None  # since the previous step ended
    train_s: float | None = None  # the optimiser step(s) in the train worker
    sync_s: float | None = None  # publish + weight sync to every rollout replica
    train_sync_s: float | None = None  # from the batch being handed to training to the end of the sync
    sync_bytes: int | None = None  # bytes the rollout replicas received for this version (with LoRA: adapters only)
    tokens: int | None = None  # tokens in the training batch
    gen_tok_s: float | None = None  # generated tokens of the batch / step time
    trajectories_per_s: float | None = None
    buffer_groups: int | None = None  # finished groups waiting after the step
    in_flight_groups: int | None = None  # groups rolling out after the step
    rss_mb: float | None = None  # driver memory
    rss_mb_train: float | None = None
    rss_mb_rollout: float | None = None  # the largest of the rollout replicas
    rss_mb_env: float | None = None  # the largest of the EnvWorkers
    train_version: int | None = None  # the version the step started from
    batch_digest: str | None = None  # hash of the batch's token ids (same seed, same batch)
    trajectories: int | None = None
    reward: float | None = None  # mean over the batch
    success: float | None = None  # mean over the batch (sampled, not greedy)
    turns: float | None = None
    invalid_actions: float | None = None
    tool_calls: float | None = None  # tool calls per trajectory (mean over the batch)
    tool_errors: float | None = None  # of which ended in an error message to the model
    generated_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    staleness_hist: dict[str, int] | None = None  # staleness (versions) -> trajectories
    staleness_max: int | None = None
    per_task: dict[str, dict[str, Any]] | None = None  # task -> success, reward, trajectories
    token_staleness_hist: list[int] | None = None  # entry i: generated tokens of the batch i versions old
    resumed_turns: int | None = None  # turns of the batch resumed from partial output after an interruption
    resumed_tokens: int | None = None  # the tokens those turns kept
    # What is trained next to what was admitted (docs/async.md#what-is-trained-is-visible): means per trajectory
    # of the batch, and of the admitted groups whose rollouts ended since the previous batch. The stale_ and
    # cancelled_ sets, and the _groups_step / _by_task counts, stay in ``extra``.
    trained_success: float | None = None
    trained_turns: float | None = None
    trained_tokens: float | None = None
    admitted_success: float | None = None
    admitted_turns: float | None = None
    admitted_tokens: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    clip_frac: float | None = None
    entropy: float | None = None
    groups_started: int | None = None  # the run's counters so far (see Summary)
    groups_trained: int | None = None
    dropped_stale_groups: int | None = None
    restarted_stale_groups: int | None = None
    dropped_failed_groups: int | None = None
    dropped_no_signal_groups: int | None = None  # dynamic sampling (train.dynamic_sampling)
    kept_no_signal_groups: int | None = None
    signal_groups_frac: float | None = None  # share of the step's trained groups whose rewards differ
    failed_trajectories: int | None = None
    env_worker_restarts: int | None = None
    retried_groups: int | None = None
    heldout_success: float | None = None  # only on steps with a held-out evaluation (train.eval_every)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class QuantileSummary:
    """A measured quantity of one task: exact mean and count, quantiles of a bounded reservoir sample.

    With ``n == 0`` nothing was measured; the other numbers are then NaN or absent.
    """

    n: int
    mean: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskProfile:
    """One task's measured cost (per turn unless named per trajectory) and outcomes."""

    turns: QuantileSummary  # turns per trajectory
    prompt_tokens_per_turn: QuantileSummary
    new_tokens_per_turn: QuantileSummary
    cached_tokens: QuantileSummary  # per trajectory
    env_step_s: QuantileSummary
    reward_s: QuantileSummary | None = None  # per trajectory; absent when nothing was timed
    trajectory_s: QuantileSummary | None = None
    ok: int = 0  # trajectories that finished
    failed: int = 0
    success: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskProfiles:
    """``task_profiles.json``: every task's profile and the run's batch shape (feeds ``simulate --from-run``)."""

    tasks: dict[str, TaskProfile]
    groups_per_step: int
    group_size: int
    max_staleness: int
    weights: dict[str, float]
    rollout_pools: dict[str, str | None] = field(default_factory=dict)  # task -> pool (None: any rollout pool)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Summary:
    """``summary.json``: written when the run ends; ``bubble_fraction`` is added by the report.

    A stopped run has none; the report then writes one that holds only ``bubble_fraction``, so every
    field is optional on read.
    """

    name: str | None = None
    mode: str | None = None  # sync | async
    max_staleness: int | None = None
    steps: int | None = None
    wall_s: float | None = None  # the run clock at the end (continues across a resume)
    rl_wall_s: float | None = None  # first admitted group to last weight sync
    rl_window: list[float] | None = None  # [start, end] of the RL window on the run clock
    total_wall_s: float | None = None  # this process, SFT and Ray start-up included
    trajectories_trained: int | None = None
    trajectories_per_s: float | None = None
    heldout_success_before_rl: float | None = None
    heldout_success_after_rl: float | None = None
    rl_gain_points: float | None = None  # what RL added beyond the warm start: (after - before) x 100
    signal_groups_frac_mean: float | None = None  # mean over the steps of the trained groups' share with signal
    finished_signal_share: float | None = None  # share of finished groups with signal, dropped ones included
    heldout_episodes: int | None = None
    evals: list[dict[str, Any]] | None = None  # label, version, episodes, success, reward, failed, per_task, ...
    max_buffer_groups: int | None = None
    max_in_flight_groups_bound: int | None = None
    last_checkpoint: str | None = None
    routing: dict[str, Any] | None = None  # per task and pool; dead_replicas
    env_workers: list[dict[str, Any]] | None = None  # per EnvWorker: trajectories started, finished, failed, ...
    sync: dict[str, float] | None = None  # mean timings of the weight syncs
    task_profiles: dict[str, Any] | None = None  # as in task_profiles.json's tasks
    dropped_groups_by_task: dict[str, int] | None = None
    groups_started: int | None = None
    groups_trained: int | None = None
    dropped_stale_groups: int | None = None
    restarted_stale_groups: int | None = None
    dropped_failed_groups: int | None = None
    dropped_no_signal_groups: int | None = None  # dynamic sampling (train.dynamic_sampling)
    kept_no_signal_groups: int | None = None
    failed_trajectories: int | None = None
    failure_reasons: dict[str, int] | None = None
    env_worker_restarts: int | None = None
    retried_groups: int | None = None
    sft: dict[str, Any] | None = None  # the SFT warm start's record, when there was one
    resumes: int | None = None  # how many times the run was resumed
    bubble_fraction: dict[str, float] | None = None  # role -> idle / wall over the RL window (the report)
    extra: dict[str, Any] = field(default_factory=dict)


# ---- conversion ------------------------------------------------------------------------------------------
R = TypeVar("R")


def to_dict(record: Any) -> dict[str, Any]:
    """A record as its JSON object: ``None`` fields left out, nested records converted, ``extra`` merged in."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name == "extra":
            continue
        value = getattr(record, f.name)
        if value is None:
            continue
        out[f.name] = _plain(value)
    out.update(record.extra)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints``, once per record class: it re-parses every annotation on each call, and the
    controller's timeline writer converts every span (profiled: several % of the driver's CPU per step)."""
    return typing.get_type_hints(cls)


def from_dict(cls: type[R], data: Any, where: str, *, lenient: bool = False) -> R:
    """``data`` (a parsed JSON object) as a ``cls`` record; keys ``cls`` does not name go to ``extra``.

    ``lenient`` (the runtime's writers): a value of the wrong type goes to ``extra`` as it is, rather than
    raising, so a run never loses its metrics or summary to a schema slip; reading the file back names it.
    """
    if not isinstance(data, dict):
        raise RunDirError(f"{where}: expected a JSON object, got {type(data).__name__}")
    hints = _type_hints(cast(type, cls))
    known = {f.name for f in dataclasses.fields(cls)} - {"extra"}  # type: ignore[arg-type]  # cls is a record class
    values: dict[str, Any] = {}
    misfits: dict[str, Any] = {}
    for name in known:
        if name in data:
            try:
                values[name] = _convert(hints[name], data[name], f"{where}: {name}")
            except RunDirError:
                if not lenient:
                    raise
                misfits[name] = data[name]
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]  # cls is a record class
        if f.name in known
        and f.name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise RunDirError(f"{where}: missing key {missing[0]!r}")
    values["extra"] = {k: v for k, v in data.items() if k not in known} | misfits
    return cls(**values)


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)  # type: ignore[arg-type]  # hint is a record class
    if origin is dict:
        if not isinstance(value, dict):
            raise RunDirError(f"{where}: expected an object, got {value!r}")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise RunDirError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, where) for v in value]
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RunDirError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise RunDirError(f"{where}: expected an integer, got {value!r}")
    if hint is str:
        if not isinstance(value, str):
            raise RunDirError(f"{where}: expected a string, got {value!r}")
        return value
    return value  # Any


# ---- files -----------------------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    return str(value)


def dumps(record: Any) -> str:
    return json.dumps(to_dict(record), default=_jsonable)


class JsonlAppender:
    """Appends records to a JSONL file, one line each, fsynced after each call (once per step: about a
    millisecond), so a crash or a power loss loses at most the lines being written; a torn last line is
    dropped by the truncation of a resume (:func:`truncate_metrics`)."""

    def __init__(self, path: Path):
        self.path = path
        self._file = path.open("a")

    def append(self, records: Iterable[Any]) -> None:
        """A full disk raises :class:`~rollarc.report.disk_full.DiskFull`, one line (disk_full_guard.py)."""
        with run_record(self.path):
            for record in records:
                self._file.write(dumps(record) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _json_lines(path: Path, *, torn_tail: bool = False) -> Iterator[tuple[str, Any]]:
    """The file's JSON lines; ``torn_tail``: skip an unfinished last line (no newline: a crash mid-append)."""
    text = path.read_text()
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as err:
            if torn_tail and number == len(lines) and not text.endswith("\n"):
                return
            raise RunDirError(f"{where}: not valid JSON ({err.msg})") from None


def read_metrics(run_dir: str | Path) -> list[MetricsRecord]:
    """``metrics.jsonl``'s steps, in file order; an absent file is no step."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return []
    return [from_dict(MetricsRecord, row, where) for where, row in _json_lines(path)]


def signal_fraction(records: list[MetricsRecord]) -> float | None:
    """Mean over the steps of ``signal_groups_frac`` (None: no step recorded it)."""
    values = [r.signal_groups_frac for r in records if r.signal_groups_frac is not None]
    return sum(values) / len(values) if values else None


def finished_signal_share(records: list[MetricsRecord]) -> float | None:
    """Share of the finished groups whose rewards differed, dropped ones included: with dynamic sampling every
    trained group has signal, so the mean of ``signal_groups_frac`` says nothing about how sparse the task was.
    Each step's trained groups come from the run's ``groups_trained`` total (None: no step recorded both)."""
    trained_before, with_signal, judged = 0, 0.0, 0
    for record in records:
        if record.groups_trained is None:
            continue
        trained, trained_before = record.groups_trained - trained_before, record.groups_trained
        if record.signal_groups_frac is not None:
            with_signal += record.signal_groups_frac * trained
            judged += trained
    dropped = max((r.dropped_no_signal_groups or 0 for r in records), default=0)
    return with_signal / (judged + dropped) if judged + dropped else None


def rl_gain_points(before: float | None, after: float | None) -> float | None:
    """Held-out success points RL added beyond the warm start (None without both evaluations)."""
    return None if before is None or after is None else round(100.0 * (after - before), 2)


def read_timeline(run_dir: str | Path) -> list[Span]:
    """``timeline.jsonl``'s spans, in file order; an absent file is no span."""
    path = Path(run_dir) / TIMELINE
    if not path.is_file():
        return []
    return [from_dict(Span, row, where) for where, row in _json_lines(path)]


def read_task_profiles(run_dir: str | Path) -> TaskProfiles:
    path = Path(run_dir) / TASK_PROFILES
    if not path.is_file():
        raise RunDirError(
            f"{path} does not exist: it is written by a run's checkpoints and at its end "
            "(a run directory of a rollarc version that records task profiles is needed)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunDirError(f"{path}, line {err.lineno}: not valid JSON ({err.msg})") from None
    return from_dict(TaskProfiles, data, str(path))


def read_summary(run_dir: str | Path) -> Summary:
    """``summary.json``, or an empty :class:`Summary` when the run has not written one (it stopped)."""
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        return Summary()
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunDirError(f"{path}, line {err.lineno}: not valid JSON ({err.msg})") from None
    return from_dict(Summary, data, str(path))


def write_json(path: Path, record: Any) -> None:
    """A JSON record file (``summary.json``, ``task_profiles.json``), replaced atomically and durably."""
    write_text_durably(path, json.dumps(to_dict(record), indent=1, default=_jsonable))


def write_jsonl(path: Path, records: Iterable[Any]) -> None:
    """A whole JSONL file at once, replaced atomically and durably (a resume's truncation, the simulator's
    ``--timeline`` output): a crash leaves the old file or the new one, whole."""
    write_text_durably(path, "".join(dumps(r) + "\n" for r in records))


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep the steps up to ``last_step``: a resumed run redoes the ones after its checkpoint.

    A torn last line (the stopped run crashed while appending it) is dropped with the steps after the checkpoint.
    """
    path = Path(run_dir) / METRICS
    if path.is_file():
        kept = [from_dict(MetricsRecord, row, where) for where, row in _json_lines(path, torn_tail=True)]
        write_jsonl(path, [m for m in kept if m.step <= last_step])


def truncate_timeline(run_dir: Path, clock_s: float) -> None:
    """Keep the spans that started before ``clock_s`` (a checkpoint's run clock), cut at it.

    Work that started after the checkpoint is redone by the resumed run, whose clock continues from
    ``clock_s``, so the timeline reads as one run without a gap or an overlap.
    """
    path = Path(run_dir) / TIMELINE
    if not path.is_file():
        return
    spans = [from_dict(Span, row, where) for where, row in _json_lines(path, torn_tail=True)]
    write_jsonl(path, [dataclasses.replace(s, t1=min(s.t1, clock_s)) for s in spans if s.t0 < clock_s])
