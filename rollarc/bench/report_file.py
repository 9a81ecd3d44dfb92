"""Publish a benchmark's figures: its block of ``docs/benchmarks.md`` and its JSON result beside it.

Each benchmark owns one block of the page, between ``<!-- bench:NAME:start -->`` and
``<!-- bench:NAME:end -->``. A full run of ``rollarc bench NAME`` replaces that block whole (with the
date, the machine and the command), leaves every other block alone, and writes the JSON object it
prints, plus ``date``, ``machine``, ``command``, ``commit`` (the checkout's git commit, ``-dirty`` when it
had uncommitted changes) and ``machine_load`` (how much of the cores other processes used while it ran:
:mod:`rollarc.bench.machine_load`), to ``docs/benchmarks/NAME.json``. So the page only ever shows figures
a command produced, and a script can read the same figures without parsing Markdown. After each write,
the README's headline table is regenerated from every JSON file (:mod:`rollarc.bench.table`).

Rules:

- Only full runs publish. ``--quick`` runs (smoke tests, tiny workloads) and ``--no-docs`` runs never
  write into ``docs/``.
- ``ROLLARC_BENCH_DOCS=PATH`` puts the page elsewhere (tests); the JSON then goes to
  ``PATH``'s directory, under ``benchmarks/``.
- A missing page is created with a header; a missing directory (an installed package, no checkout) is
  not an error: nothing is written.
- Every write is atomic (a temporary file, then a rename), so an interrupted run never leaves half a page.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from rollarc.bench import machine_load
from rollarc.bench.table import update_readme

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE_ENV = "ROLLARC_BENCH_DOCS"
HEADER = """# Benchmarks

Each block below is written by the `rollarc bench NAME` command it names, which runs rollarc and its
baseline in the same process on the machine stated in the block. Re-running a command rewrites its own
block, and nothing else, and writes the same figures as JSON to `docs/benchmarks/NAME.json`: the object
the command prints, plus `date`, `machine`, `command`, `commit` (the git commit measured, `-dirty` with
uncommitted changes) and `machine_load` (the share of the cores other processes used while it ran,
sampled every second; the block says "quiet" below 10 %). Training benchmarks run several seeds and
publish per-seed values with their median and range. Only full runs write here: `--quick` runs and
`--no-docs` runs never do. The README's headline table is generated from these JSON files
(`rollarc bench table`), and `tests/unit/test_bench_table.py` fails when a README figure has no JSON
value or a JSON file has no block here.
"""


def page_path() -> Path:
    """Where the benchmark page is: ``$ROLLARC_BENCH_DOCS``, else ``docs/benchmarks.md`` of the checkout."""
    return Path(os.environ.get(PAGE_ENV) or REPO_ROOT / "docs" / "benchmarks.md")


def json_path(name: str, page: Path) -> Path:
    return page.parent / "benchmarks" / f"{name}.json"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores"


def git_commit(root: Path = REPO_ROOT) -> str | None:
    """The checkout's short commit, with ``-dirty`` when code differs from it; ``None`` outside a checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            # docs/ and README.md are what benchmarks write: rewriting them changes nothing measured
            [
                "git",
                "-C",
                str(root),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!docs",
                ":!README.md",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def load_phrase(load: dict[str, Any] | None) -> str:
    """How the block says whether the machine was quiet."""
    if load is None:
        return "machine load not measured"
    share = 100 * float(load["other_cpu_share"])
    return f"{'quiet' if load['quiet'] else 'not quiet'}: other processes used {share:.0f} % of the cores"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A plain GitHub markdown table; floats are shown with 3 significant digits."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def add_docs_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-docs`` (old spelling ``--no-readme`` still accepted): run in full but publish nothing."""
    parser.add_argument(
        "--no-docs",
        "--no-readme",
        dest="no_docs",
        action="store_true",
        help="do not write docs/benchmarks.md or docs/benchmarks/NAME.json",
    )


def publish(
    name: str,
    body: str,
    result: dict[str, Any],
    command: str,
    *,
    quick: bool,
    no_docs: bool,
    page: Path | None = None,
    meta: dict[str, Any] | None = None,
) -> list[Path]:
    """Write the block and the JSON of a full run; returns the files written (none for quick or no-docs runs).
    ``meta`` (commit, machine load) defaults to this checkout's and this process's; a benchmark published again
    from its recorded runs passes the record of the run that measured them."""
    if quick or no_docs:
        return []
    page = page or page_path()
    if not page.parent.is_dir():
        print(f"not publishing: {page.parent} does not exist (not a rollarc checkout?)", flush=True)
        return []
    date = _dt.date.today().isoformat()
    meta = meta or {"commit": git_commit(), "machine_load": machine_load.summary()}
    written = [
        write_block(name, body, command, page, date=date, meta=meta),
        write_json(name, result, command, json_path(name, page), date=date, meta=meta),
    ]
    readme = page.parent.parent / "README.md"
    if page.parent.name == "docs" and readme.is_file() and update_readme(readme, page.parent / "benchmarks"):
        written.append(readme)
    print("wrote " + " and ".join(str(p) for p in written), flush=True)
    return written


def render_block(name: str, body: str, command: str, date: str, where: str, meta: dict[str, Any] | None = None) -> str:
    meta = meta or {}
    commit = f" at commit `{meta['commit']}`" if meta.get("commit") else ""
    return (
        f"<!-- bench:{name}:start -->\nMeasured {date} on {where} ({load_phrase(meta.get('machine_load'))}){commit}"
        f" with `{command}`:\n\n{body.strip()}\n<!-- bench:{name}:end -->"
    )


def write_block(
    name: str, body: str, command: str, page: Path, *, date: str, meta: dict[str, Any] | None = None
) -> Path:
    """Replace the block of benchmark ``name`` whole, or append it under its own heading; create the page."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = render_block(name, body, command, date, machine(), meta)
    text = page.read_text() if page.is_file() else HEADER
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + f"\n\n## `{command}`\n\n" + block + "\n"
    _atomic_write(page, text)
    return page


def write_json(
    name: str, result: dict[str, Any], command: str, path: Path, *, date: str, meta: dict[str, Any] | None = None
) -> Path:
    """The benchmark's printed result plus ``date``, ``machine``, ``command`` and ``meta``, as one JSON file."""
    meta = {"bench": name, "date": date, "machine": machine(), "command": command, **(meta or {})}
    clash = sorted(k for k in meta if k in result and result[k] != meta[k])
    if clash:
        raise ValueError(f"bench {name}: result keys {clash} collide with the metadata written beside them")
    path.parent.mkdir(exist_ok=True)
    _atomic_write(path, json.dumps({**meta, **result}, indent=1) + "\n")
    return path


def emit_json(result: dict[str, Any]) -> None:
    """Print the benchmark's result as the last line, one JSON object."""
    print(json.dumps(result, sort_keys=False), flush=True)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
