"""A full disk while a run writes its own records (``metrics.jsonl``, ``timeline.jsonl``, ``summary.json``) is
one line, as it is while a checkpoint is written (:mod:`rollarc.models.checkpoint_write`): what is intact and
how to go on, instead of a traceback. The records are appended and replaced durably, so what was written before
the failed write is whole, and a resume truncates the metrics to its checkpoint."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from rollarc.report.disk_full import DISK_FULL_ERRNOS, DiskFull


@contextlib.contextmanager
def run_record(path: Path) -> Iterator[None]:
    """Turn a full disk while writing the run record ``path`` into :class:`DiskFull`; other errors pass."""
    try:
        yield
    except OSError as err:
        code = err.errno
        if code not in DISK_FULL_ERRNOS:
            raise
        raise DiskFull(
            f"disk full ({errno.errorcode.get(code, code)}) while writing {path.name} in {path.parent}; its "
            f"checkpoints and the records written before are intact; free space and resume with resume={path.parent}"
        ) from None
