"""Writing a checkpoint directory: atomically, durably, with its manifest, and a full disk as one line.

A full disk (ENOSPC, a quota: EDQUOT, a file-size limit: EFBIG) while a checkpoint is written leaves the
previous complete checkpoint as it was (the temporary directory is removed) and becomes :class:`DiskFull`,
whose message says where the run can resume from. It is raised in the trainer actor; the controller turns it
into a ``RunError`` (Ray wraps it in a ``RayTaskError`` that is also a ``DiskFull``; ``.message`` reaches the
original's).
"""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator
from pathlib import Path

from ray.exceptions import RayTaskError
from safetensors import SafetensorError

from rollarc.models.checkpoint import atomic_directory
from rollarc.models.checkpoint_retention import complete_checkpoints
from rollarc.report.disk_full import DISK_FULL_ERRNOS, DiskFull

# safetensors (Rust) reports a failed write as "I/O error: No space left on device (os error 28)"
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def full_disk_errno(err: BaseException) -> int | None:
    """The errno of ``err`` (or of an error it was raised from) when it says the disk is full, else None."""
    seen: BaseException | None = err
    while seen is not None:
        code = seen.errno if isinstance(seen, OSError) else None
        if code is None and isinstance(seen, SafetensorError):
            match = _RUST_OS_ERROR.search(str(seen))
            code = int(match.group(1)) if match else None
        if code in DISK_FULL_ERRNOS:
            return code
        # an error of the trainer actor reaches the driver as Ray's wrapper of it (t2i: the driver's directory)
        seen = seen.cause if isinstance(seen, RayTaskError) else seen.__cause__ or seen.__context__
    return None


def disk_full_message(path: Path, code: int) -> str:
    checkpoints = path.parent
    complete = [p for p in complete_checkpoints(checkpoints) if p != path]
    intact = (
        f"the last complete checkpoint {complete[-1].name} is intact"
        if complete
        else "no complete checkpoint was written before it"
    )
    return (
        f"disk full ({errno.errorcode.get(code, code)}) while writing checkpoint {path.name} under {checkpoints}; "
        f"{intact}; free space and resume with resume={checkpoints.parent}"
    )


@contextlib.contextmanager
def checkpoint_directory(path: str | Path) -> Iterator[Path]:
    """:func:`~rollarc.models.checkpoint.atomic_directory` with a manifest; a full disk raises :class:`DiskFull`."""
    path = Path(path)
    try:
        with atomic_directory(path, manifest=True) as tmp:
            yield tmp
    except (OSError, SafetensorError, RayTaskError) as err:
        code = full_disk_errno(err)
        if code is None:
            raise
        raise DiskFull(disk_full_message(path, code)) from None
