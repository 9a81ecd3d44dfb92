"""Write a benchmark's measured figures into the README's performance section.

Each benchmark owns one block between ``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->``.
The block is replaced whole, with the command and the date, so the README only ever shows figures a
command produced. A missing README (a non-editable install) is not an error: nothing is written.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def readme_path() -> Path:
    return Path(os.environ.get("ROLLARC_README", REPO_ROOT / "README.md"))


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A plain GitHub markdown table; floats are shown with 3 significant digits."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_block(name: str, body: str, command: str, path: Path | None = None) -> bool:
    """Replace (or append) the README block of benchmark ``name``; True when the README was written."""
    path = path or readme_path()
    if not path.is_file():
        return False
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    stamp = _dt.date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    block = f"{start}\nMeasured {stamp} on {machine} with `{command}`:\n\n{body.strip()}\n{end}"
    text = path.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def emit_json(result: dict[str, Any]) -> None:
    """Print the benchmark's result as the last line, one JSON object."""
    print(json.dumps(result, sort_keys=False), flush=True)
