"""Writes that survive a crash or a power loss: the data is fsynced, then the directory entry that names it.

A rename makes a new file visible at once, but until its data and the parent directory are on disk a power
loss can leave the new name pointing at an empty or partial file. So every replacement here goes: write a
temporary sibling, fsync it, rename it over the target, fsync the parent directory.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def fsync_path(path: str | Path) -> None:
    """Flush one file's (or one directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """Flush every file and directory under ``root`` (itself included), before it is renamed into place."""
    for directory, _, files in os.walk(root):
        for name in files:
            fsync_path(Path(directory) / name)
        fsync_path(directory)


def replace_durably(tmp: str | Path, path: str | Path) -> None:
    """Rename ``tmp`` (already fsynced) over ``path`` and flush the parent directory, so the rename is kept."""
    os.replace(tmp, path)
    fsync_path(Path(path).parent)


def write_text_durably(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably: a reader sees the old file or the new one, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with tmp.open("w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        replace_durably(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line_durably(path: str | Path, line: str) -> None:
    """Append one line to a small log (``config_history.jsonl``) and fsync it."""
    with Path(path).open("a") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
