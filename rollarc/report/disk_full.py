"""A full disk, as one error everywhere a run writes (checkpoints, its records): light to import, so the CLI
catches it without loading Ray (:mod:`rollarc.models.checkpoint_write` and :mod:`rollarc.report.disk_full_guard`
raise it)."""

from __future__ import annotations

import errno

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFull(RuntimeError):
    """The disk filled up while a run wrote; ``message`` is one line: what is intact, what to do."""

    message: str

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
