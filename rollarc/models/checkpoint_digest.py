"""A checkpoint's ``manifest.json``: the SHA-256 and size of every file in it, written last, checked on resume.

A checkpoint damaged after it was written (a flipped bit, a truncated copy, a file lost) must not be loaded as
if it were whole: the resume falls back to an older checkpoint instead (:mod:`rollarc.runtime.run_dir`).
A checkpoint written before manifests existed has none: it is loadable but unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from rollarc.config.io import ConfigError

MANIFEST = "manifest.json"
_CHUNK = 1 << 20


class DamagedCheckpoint(ConfigError):
    """A checkpoint whose files do not match its manifest; the message names the file and what is wrong."""


def _files(directory: Path) -> list[str]:
    found = []
    for parent, _, names in os.walk(directory):
        for name in names:
            rel = (Path(parent) / name).relative_to(directory).as_posix()
            if rel != MANIFEST:
                found.append(rel)
    return sorted(found)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: str | Path) -> None:
    """Record every file under ``directory`` (written last, so it covers everything the checkpoint holds)."""
    directory = Path(directory)
    files = {
        rel: {"sha256": sha256_file(directory / rel), "bytes": (directory / rel).stat().st_size}
        for rel in _files(directory)
    }
    (directory / MANIFEST).write_text(json.dumps({"files": files}, indent=1) + "\n")


def verify_manifest(directory: str | Path) -> bool:
    """True when every file the manifest lists is there, whole; False when there is no manifest (unverified).

    Raises :class:`DamagedCheckpoint` (one line: the file and the fault) on a mismatch, a missing or an
    unreadable file, or an unreadable manifest.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        return False
    try:
        files = json.loads(path.read_text())["files"]
        entries = {str(rel): (str(e["sha256"]), int(e["bytes"])) for rel, e in files.items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as err:
        raise DamagedCheckpoint(f"{path} is not a readable manifest ({type(err).__name__})") from None
    for rel, (sha256, size) in sorted(entries.items()):
        file = directory / rel
        if not file.is_file():
            raise DamagedCheckpoint(f"{file} is missing (listed in {MANIFEST})")
        if file.stat().st_size != size:
            raise DamagedCheckpoint(f"{file} has {file.stat().st_size} bytes, {MANIFEST} says {size}")
        try:
            actual = sha256_file(file)
        except OSError as err:
            raise DamagedCheckpoint(f"{file} cannot be read ({err.strerror})") from None
        if actual != sha256:
            raise DamagedCheckpoint(f"{file} does not match its SHA-256 in {MANIFEST}")
    return True
