"""The scaffolding every ``rollarc bench NAME`` shares, so that a benchmark module holds only its workload and
its comparison.

- **Arguments**: :func:`bench_parser` adds the flags every benchmark accepts (``--quick``, ``--json``,
  ``--no-docs``) and, when asked, the common optional ones (``--config``, ``--seeds``, ``--runs``,
  ``--publish-as``, positional ``key=value`` overrides), with one meaning each. :func:`quick_or` resolves a flag
  whose default differs in a ``--quick`` run; :func:`seed_count` and :func:`refuse_unnamed_overrides` are the
  checks several benchmarks made in their own words.
- **Seeds**: :func:`run_seeds` runs one function per seed with a progress line; :mod:`rollarc.bench.seed_stats`
  gives the per-seed values with their median and range, :func:`median_or_none` a median that skips misses.
- **Machine load**: the ``rollarc bench`` entry point starts the sampler (:mod:`rollarc.bench.machine_load`);
  :func:`open_runs` opens a ``--runs`` root (:mod:`rollarc.bench.runs_root`) and records the load so far.
- **Publication**: :func:`finish` writes the ``docs/benchmarks.md`` block and ``docs/benchmarks/NAME.json`` of a
  full run (:mod:`rollarc.bench.report_file`), prints the JSON line last and returns the exit code.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rollarc.bench import machine_load, runs_root
from rollarc.bench.report_file import add_docs_flag, emit_json, git_commit, publish

T = TypeVar("T")
QUICK_DEFAULT_HELP = "a small run for smoke tests; publishes nothing"
RUNS_HELP = "where the runs go (default: a temporary directory)"


def bench_parser(
    prog: str,
    doc: str | None,
    *,
    quick: str = QUICK_DEFAULT_HELP,
    config: str | None = None,
    config_help: str | None = None,
    seeds: str | None = None,
    runs: str | None = None,
    publish_as: str | None = None,
    publish_help: str | None = None,
) -> argparse.ArgumentParser:
    """A parser with ``--quick`` (help ``quick``), ``--json`` and ``--no-docs``; ``--config`` (default ``config``,
    added when it or ``config_help`` is given),
    ``--seeds`` (help ``seeds``), ``--runs`` (help ``runs``) and ``--publish-as`` (default ``publish_as``) when given.
    ``prog`` is the command after ``rollarc``; ``doc`` the module docstring, whose first line describes it."""
    parser = argparse.ArgumentParser(prog=f"rollarc {prog}", description=(doc or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", action="store_true", help="accepted; the JSON line is always printed last")
    add_docs_flag(parser)
    if config is not None or config_help is not None:
        parser.add_argument("--config", default=config, help=config_help)
    if seeds is not None:
        parser.add_argument("--seeds", type=int, default=None, help=seeds)
    if runs is not None:
        parser.add_argument("--runs", default=None, help=runs)
    if publish_as is not None:
        parser.add_argument(
            "--publish-as", default=publish_as, help=publish_help or "name of the published block and JSON"
        )
    return parser


def add_overrides(parser: argparse.ArgumentParser, what: str = "every run", help_text: str | None = None) -> None:
    """Positional ``key=value`` config overrides, applied to ``what`` (or described by ``help_text``)."""
    parser.add_argument("overrides", nargs="*", help=help_text or f"key=value overrides applied to {what}")


def quick_or(value: T | None, quick: bool, full: T, small: T) -> T:
    """``value`` when the flag was given, else ``small`` in a ``--quick`` run and ``full`` in a full one."""
    if value is not None:
        return value
    return small if quick else full


def seed_count(parser: argparse.ArgumentParser, args: argparse.Namespace, default: int) -> int:
    """``--seeds``, else 1 in a ``--quick`` run and ``default`` in a full one; fewer than one is refused."""
    seeds = int(quick_or(args.seeds, args.quick, default, 1))
    if seeds < 1:
        parser.error(f"--seeds {seeds}: at least one seed is needed")
    return seeds


def refuse_unnamed_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace, headline: str) -> None:
    """Overrides change what is measured: a full run with any must not overwrite the headline ``headline``."""
    if args.overrides and args.publish_as == headline and not (args.quick or args.no_docs):
        parser.error("overrides change what is measured: publish them under their own name with --publish-as NAME")


def runs_folder(runs: str | None, prefix: str) -> Path:
    """``--runs``, else a new temporary directory named after the benchmark."""
    return Path(runs) if runs else Path(tempfile.mkdtemp(prefix=f"rollarc-bench-{prefix}-"))


def open_runs(parser: argparse.ArgumentParser, runs: Path, overrides: list[str]) -> dict[str, Any]:
    """Open the ``--runs`` root for this checkout's commit and ``overrides`` (a mismatch is one line on stderr)
    and record the machine load so far, so that a later ``--from-runs`` finds a record."""
    try:
        meta = runs_root.open_root(runs, git_commit(), overrides)
    except runs_root.RootMismatch as err:
        parser.error(str(err))
    record_load(runs, meta)
    return meta


def record_load(runs: Path, meta: dict[str, Any], trained: str | None = None) -> None:
    """Note ``trained`` (a run label, if any) and this session's machine load in the root's record."""
    runs_root.record(runs, meta, trained, machine_load.summary())


def run_seeds(seeds: Sequence[int], run: Callable[[int], T], what: str = "seed") -> list[T]:
    """``run(seed)`` for each seed in order, each announced with a ``== seed N`` line."""
    out = []
    for seed in seeds:
        print(f"== {what} {seed}", flush=True)
        out.append(run(seed))
    return out


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the known values; ``None`` when none is known."""
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def command(name: str, argv: Sequence[str]) -> str:
    """The command line recorded with the figures: ``rollarc bench NAME`` and the arguments it was given."""
    return shlex.join(["rollarc", "bench", name, *argv])


def recorded_meta(meta: dict[str, Any], keys: Sequence[str] = ("commit", "machine_load")) -> dict[str, Any]:
    """The part of a ``--runs`` root's record published beside the figures (those runs' commit and load)."""
    return {key: meta[key] for key in keys if key in meta}


def finish(
    name: str,
    body: str,
    result: dict[str, Any],
    cmd: str,
    args: argparse.Namespace,
    meta: dict[str, Any] | None = None,
    code: int = 0,
    publishable: bool = True,
) -> int:
    """Publish a full run (block and JSON; nothing for ``--quick``, ``--no-docs`` or a run that is not
    ``publishable``, e.g. one with an arm missing), print the JSON line last, return ``code`` (the exit code)."""
    no_docs = args.no_docs or not publishable
    publish(name, body, result, cmd, quick=args.quick, no_docs=no_docs, meta=meta or None)
    emit_json(result)
    return code
