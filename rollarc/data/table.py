"""Read a dataset task's rows with the ``datasets`` library (local files only), split and checked.

``path`` is a ``.jsonl``/``.json``/``.parquet`` file (one split, ``train``) or a directory written by
``save_to_disk``; ``files`` maps split names to files. Nothing is downloaded: the ``json`` and
``parquet`` builders read local files, and ``load_from_disk`` reads a local directory.

A missing file, split or column is a :class:`DatasetError` (one line, raised when the task's env is
made, i.e. in the start-up checks). A malformed row (a prompt that is neither text nor chat messages, a
missing ground truth or reference) is skipped and counted; when more than ``max_malformed_fraction``
of a split is malformed, that is a :class:`DatasetError` naming the count and the first bad row.

The held-out split is the data's own ``heldout_split`` when it has one, else a seeded cut of the
training split (``Dataset.train_test_split``). Training rows are visited in a seeded shuffled order.
Loaded datasets are memoised per process: every env instance of a worker shares one copy, and the first
load is single-flight (a lock): an env worker builds many envs at once in its thread pool, and each
reading the files itself made the first held-out evaluation's constructions pass ``step_timeout_s``
on a loaded machine.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from rollarc.data.config import DatasetConfig
from rollarc.envs.registry import EnvLoadError

# One load per process and split; per-load progress bars from every env worker only bury the run's output.
datasets.disable_progress_bars()

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
Messages = list[dict[str, str]]


class DatasetError(EnvLoadError):
    """The dataset cannot be used as configured; the message says what and where, in one line."""


@dataclass(frozen=True)
class Malformed:
    count: int
    total: int
    example: str  # the first bad row and why


@dataclass(frozen=True)
class Table:
    """The usable rows of each split, and the malformed rows skipped per split."""

    splits: dict[str, datasets.Dataset]
    malformed: dict[str, Malformed]
    conversational: bool  # prompts are chat messages (else plain text)


def column(row: dict[str, Any], name: str) -> Any:
    """A (possibly dotted) column of a row: ``reward_model.ground_truth`` reads a struct's field."""
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def has_column(features: datasets.Features, name: str) -> bool:
    node: Any = features
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def prompt_problem(prompt: Any) -> str | None:
    """Why ``prompt`` is neither non-empty text nor a list of {role, content} messages (None: it is fine)."""
    if isinstance(prompt, str):
        return None if prompt else "the prompt is empty"
    if isinstance(prompt, list) and prompt:
        for message in prompt:
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                return f"prompt message {message!r} is not a {{role, content}} pair of strings"
        return None
    return f"the prompt ({type(prompt).__name__}) is neither text nor a list of chat messages"


_LOADING = threading.Lock()


def load_table(cfg: DatasetConfig, needs_ground_truth: bool) -> Table:
    """The checked splits of ``cfg`` (memoised per process, loaded once; see the module docstring)."""
    with _LOADING:
        return _load(cfg.model_dump_json(), needs_ground_truth)


@functools.lru_cache(maxsize=8)
def _load(cfg_json: str, needs_ground_truth: bool) -> Table:
    cfg = DatasetConfig.model_validate_json(cfg_json)
    raw = _read(cfg)
    if cfg.train_split not in raw:
        raise DatasetError(f"dataset has no split {cfg.train_split!r} (train_split); its splits: {', '.join(raw)}")
    train = raw[cfg.train_split]
    required = [cfg.prompt_column]
    if needs_ground_truth:
        if cfg.ground_truth_column is None:
            raise DatasetError("a verl-style reward function needs dataset.ground_truth_column")
        required.append(cfg.ground_truth_column)
    if cfg.reference_column is not None:
        required.append(cfg.reference_column)
    for name in required:
        if not has_column(train.features, name):
            raise DatasetError(
                f"dataset split {cfg.train_split!r} has no column {name!r}; its columns: {', '.join(train.column_names)}"
            )
    splits = {cfg.train_split: train}
    if cfg.heldout_split in raw:
        splits[cfg.heldout_split] = raw[cfg.heldout_split]
    malformed = {}
    for name, ds in list(splits.items()):  # rows are numbered as in the files
        good, bad = _check_rows(ds, required)
        if bad:
            malformed[name] = Malformed(len(bad), len(ds), bad[0])
            if len(bad) > cfg.max_malformed_fraction * len(ds):
                raise DatasetError(
                    f"dataset split {name!r}: {len(bad)} of {len(ds)} rows are malformed (more than "
                    f"max_malformed_fraction={cfg.max_malformed_fraction:g}), e.g. {bad[0]}"
                )
        if not good:
            raise DatasetError(f"dataset split {name!r} has no usable rows")
        splits[name] = ds.select(good)
    if cfg.heldout_split not in splits:
        if len(splits[cfg.train_split]) < 2:
            raise DatasetError(f"dataset split {cfg.train_split!r} has too few rows to hold some out")
        cut = splits[cfg.train_split].train_test_split(test_size=cfg.heldout_fraction, seed=cfg.split_seed)
        splits[cfg.train_split], splits[cfg.heldout_split] = cut["train"], cut["test"]
    splits[cfg.train_split] = splits[cfg.train_split].shuffle(seed=cfg.split_seed)
    first = column(splits[cfg.train_split][0], cfg.prompt_column)
    return Table(splits, malformed, conversational=isinstance(first, list))


def _read(cfg: DatasetConfig) -> dict[str, datasets.Dataset]:
    if cfg.path is not None:
        path = Path(cfg.path)
        if path.is_dir():
            try:
                loaded = datasets.load_from_disk(str(path))
            except FileNotFoundError as err:
                raise DatasetError(f"dataset.path {cfg.path}: not a directory written by save_to_disk ({err})") from err
            if isinstance(loaded, datasets.DatasetDict):
                return dict(loaded)
            return {"train": loaded}
        files = {"train": cfg.path}
    else:
        files = dict(cfg.files)
    out = {}
    for split, file in files.items():
        suffix = Path(file).suffix.lower()
        if suffix not in BUILDERS:
            raise DatasetError(f"dataset file {file}: unknown format {suffix!r}; use .jsonl, .json or .parquet")
        if not Path(file).is_file():
            raise DatasetError(f"dataset file {file} does not exist")
        try:
            out[split] = datasets.load_dataset(BUILDERS[suffix], data_files={split: file}, split=split)
        except datasets.exceptions.DatasetGenerationError as err:
            cause = err.__cause__ or err
            raise DatasetError(f"dataset file {file} cannot be read: {type(cause).__name__}: {cause}") from err
    return out


def _check_rows(ds: datasets.Dataset, required: list[str]) -> tuple[list[int], list[str]]:
    """Indices of the usable rows, and a reason for each malformed one."""
    good: list[int] = []
    bad: list[str] = []
    prompt_name, others = required[0], required[1:]
    for index, row in enumerate(ds):
        problem = prompt_problem(column(row, prompt_name))
        if problem is None:
            missing = [name for name in others if column(row, name) is None]
            problem = f"{', '.join(missing)} missing" if missing else None
        if problem is None:
            good.append(index)
        else:
            bad.append(f"row {index}: {problem}")
    return good, bad
