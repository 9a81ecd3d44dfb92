"""Publish a benchmark's figures: its block of ``docs/benchmarks.md`` and its JSON result beside it.

Each benchmark owns one block of the page, between ``<!-- bench:NAME:start -->`` and
``<!-- bench:NAME:end -->``. A full run of ``rollarc bench NAME`` replaces that block whole (with the
date, the machine and the command), leaves every other block alone, and writes the JSON object it
prints, plus ``date``, ``machine`` and ``command``, to ``docs/benchmarks/NAME.json``. So the page only
ever shows figures a command produced, and a script can read the same figures without parsing Markdown.

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
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE_ENV = "ROLLARC_BENCH_DOCS"
HEADER = """# Benchmarks

Each block below is written by the `rollarc bench NAME` command it names, which runs rollarc and its
baseline in the same process on the machine stated in the block. Re-running a command rewrites its own
block, and nothing else, and writes the same figures as JSON to `docs/benchmarks/NAME.json` (the object
the command prints, plus `date`, `machine` and `command`). Only full runs write here: `--quick` runs and
`--no-docs` runs never do.
"""


def page_path() -> Path:
    """Where the benchmark page is: ``$ROLLARC_BENCH_DOCS``, else ``docs/benchmarks.md`` of the checkout."""
    return Path(os.environ.get(PAGE_ENV) or REPO_ROOT / "docs" / "benchmarks.md")


def json_path(name: str, page: Path) -> Path:
    return page.parent / "benchmarks" / f"{name}.json"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores"


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
    name: str, body: str, result: dict[str, Any], command: str, *, quick: bool, no_docs: bool, page: Path | None = None
) -> list[Path]:
    """Write the block and the JSON of a full run; returns the files written (none for quick or no-docs runs)."""
    if quick or no_docs:
        return []
    page = page or page_path()
    if not page.parent.is_dir():
        print(f"not publishing: {page.parent} does not exist (not a rollarc checkout?)", flush=True)
        return []
    date = _dt.date.today().isoformat()
    written = [
        write_block(name, body, command, page, date=date),
        write_json(name, result, command, json_path(name, page), date=date),
    ]
    print("wrote " + " and ".join(str(p) for p in written), flush=True)
    return written


def render_block(name: str, body: str, command: str, date: str, where: str) -> str:
    return (
        f"<!-- bench:{name}:start -->\nMeasured {date} on {where} with `{command}`:\n\n{body.strip()}\n"
        f"<!-- bench:{name}:end -->"
    )


def write_block(name: str, body: str, command: str, page: Path, *, date: str) -> Path:
    """Replace the block of benchmark ``name`` whole, or append it under its own heading; create the page."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = render_block(name, body, command, date, machine())
    text = page.read_text() if page.is_file() else HEADER
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + f"\n\n## `rollarc bench {name}`\n\n" + block + "\n"
    _atomic_write(page, text)
    return page


def write_json(name: str, result: dict[str, Any], command: str, path: Path, *, date: str) -> Path:
    """The benchmark's printed result plus ``date``, ``machine`` and ``command``, as one JSON file."""
    meta = {"bench": name, "date": date, "machine": machine(), "command": command}
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
