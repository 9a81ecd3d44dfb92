"""Read a dataset task's rows with the ``datasets`` library (local files only), split and checked.

``path`` is a ``.jsonl``/``.json``/``.parquet`` file or a glob of them (one split, ``train``), a directory
written by ``save_to_disk`` (recognised by its ``dataset_dict.json`` or ``state.json``), or a directory of
data-file shards split by file name with ``datasets``' own patterns; ``files`` maps split names to a
file, a glob or a list of them, as ``load_dataset(data_files=...)`` takes them. The files of a split share
one format; a glob that matches nothing is an error. Nothing is downloaded: the ``json`` and ``parquet``
builders read local files, and ``load_from_disk`` reads a local directory.

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
import glob
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets.data_files import DataFilesDict, get_data_patterns

from rollarc.data.config import DatasetConfig
from rollarc.envs.registry import EnvLoadError

# One load per process and split; per-load progress bars from every env worker only bury the run's output.
datasets.disable_progress_bars()

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes at a directory's top
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
            if not any((path / marker).is_file() for marker in SAVED_MARKERS):
                return _load_files(_shards(path), f"dataset.path {cfg.path}")
            try:
                loaded = datasets.load_from_disk(str(path))
            except FileNotFoundError as err:
                raise DatasetError(f"dataset.path {cfg.path}: not a directory written by save_to_disk ({err})") from err
            if isinstance(loaded, datasets.DatasetDict):
                return dict(loaded)
            return {"train": loaded}
        files = {"train": _expand(cfg.path)}
    else:
        files = {split: [f for entry in _entries(value) for f in _expand(entry)] for split, value in cfg.files.items()}
    return _load_files(files, "dataset.files")


def _entries(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _expand(entry: str) -> list[str]:
    """A file, or the sorted files a glob matches (``**`` recurses); a glob matching nothing is an error."""
    if not glob.has_magic(entry):
        return [entry]
    matched = sorted(f for f in glob.glob(entry, recursive=True) if Path(f).is_file())
    if not matched:
        raise DatasetError(f"dataset file pattern {entry} matches no file")
    return matched


def _shards(directory: Path) -> dict[str, list[str]]:
    """A directory of data files, split by file name with ``datasets``' own patterns (``train-*.parquet``,
    ``test.jsonl``, ``data/validation-00000-of-00001.parquet``; no split in the names: all ``train``)."""
    patterns = get_data_patterns(str(directory))
    resolved = DataFilesDict.from_patterns(patterns, base_path=str(directory))
    splits = {
        str(split): sorted(f for f in files if Path(f).suffix.lower() in BUILDERS) for split, files in resolved.items()
    }
    splits = {split: files for split, files in splits.items() if files}
    if not splits:
        raise DatasetError(
            f"dataset.path {directory}: a directory with neither a save_to_disk dataset ({' or '.join(SAVED_MARKERS)}) "
            "nor .jsonl/.json/.parquet files"
        )
    return splits


def _load_files(files: dict[str, list[str]], where: str) -> dict[str, datasets.Dataset]:
    out = {}
    for split, names in files.items():
        if not names:
            raise DatasetError(f"{where}: split {split!r} lists no file")
        suffixes = sorted({Path(name).suffix.lower() for name in names})
        for suffix, name in ((Path(n).suffix.lower(), n) for n in names):
            if suffix not in BUILDERS:
                raise DatasetError(f"dataset file {name}: unknown format {suffix!r}; use .jsonl, .json or .parquet")
            if not Path(name).is_file():
                raise DatasetError(f"dataset file {name} does not exist")
        builders = {BUILDERS[suffix] for suffix in suffixes}
        if len(builders) > 1:
            raise DatasetError(
                f"{where}: the files of split {split!r} mix formats ({', '.join(suffixes)}); a split's files share one"
            )
        try:
            out[split] = datasets.load_dataset(builders.pop(), data_files={split: names}, split=split)
        except datasets.exceptions.DatasetGenerationError as err:
            cause = err.__cause__ or err
            shown = names[0] if len(names) == 1 else f"{names[0]} (and {len(names) - 1} more)"
            raise DatasetError(f"dataset file {shown} cannot be read: {type(cause).__name__}: {cause}") from err
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
