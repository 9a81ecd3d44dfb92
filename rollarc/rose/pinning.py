"""Pin an actor's process to its cores, so serving and dedicated rollout never share one (``rollarc bench rose``).

torch's intra-op threads are set to the number of cores, and the CPU affinity of every thread of the process
to those cores where the OS allows it (Linux ``sched_setaffinity``; elsewhere only the thread count is set). A
Ray actor's process already runs several threads when its constructor starts (the core worker's, the event
loop's), so each one is pinned, not only the caller; threads started later inherit the affinity.

:func:`pin_process` pins another process of this machine (the Router's actor, from the driver), and
:func:`pinned_here` pins the calling process for a block and restores its affinity after, so that the
rollout side's driver and Router run on the rollout cores too and never take the serving core.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

PROC = Path("/proc")  # Linux: /proc/<pid>/task has one entry per thread of the process


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _threads(pid: int | None) -> list[int]:
    """Thread ids of process ``pid`` (``None``: this one); ``[pid or 0]`` where they cannot be listed."""
    tasks = PROC / ("self" if pid is None else str(pid)) / "task"
    return [int(entry.name) for entry in tasks.iterdir()] if tasks.is_dir() else [pid or 0]


def _apply(pid: int | None, cores: list[int]) -> bool:
    """Set the affinity of every thread of ``pid`` (``None``: this process) to ``cores``; False if not allowed."""
    try:
        for thread in _threads(pid):
            try:
                os.sched_setaffinity(thread, cores)
            except ProcessLookupError:  # the thread ended while we listed them
                continue
    except OSError:  # a container may forbid it
        return False
    return True


def machine_cores() -> list[int]:
    """The cores of this machine, whatever this process is pinned to: a Ray actor inherits the driver's
    affinity (``cluster.cores``) and may still be pinned elsewhere (``harvest.cores``)."""
    return list(range(os.cpu_count() or 1))


def missing_cores(cores: list[int], key: str) -> str | None:
    """The one line that refuses ``cores`` (config key ``key``) naming cores this machine lacks, or None."""
    missing = sorted(set(cores) - set(machine_cores()))
    return f"{key} {cores}: this machine has no core {missing} (it has {machine_cores()})" if missing else None


def _set_affinity(pid: int | None, cores: list[int]) -> list[int]:
    """Pin every thread of ``pid`` to ``cores`` (those this machine has); the cores pinned to, [] if none."""
    usable = [c for c in cores if c in machine_cores()]
    if not usable or not hasattr(os, "sched_setaffinity"):
        return []
    return usable if _apply(pid, usable) else []


def pin(cores: list[int]) -> list[int]:
    """Pin this process to ``cores`` (those that exist here); returns the cores it is pinned to ([] if not)."""
    usable = [c for c in cores if c in machine_cores()]
    torch.set_num_threads(max(1, len(usable) or len(cores)))
    return _set_affinity(None, cores)


def pin_process(pid: int, cores: list[int]) -> list[int]:
    """Pin every thread of another process ``pid`` on this machine to ``cores``; its torch threads are its own."""
    return _set_affinity(pid, cores)


def pin_threads_here(cores: list[int]) -> list[int]:
    """Pin every thread of this process to ``cores`` (no torch change); the processes it starts inherit it."""
    return _set_affinity(None, cores)


def restore_threads_here(cores: list[int]) -> None:
    """Undo :func:`pin_threads_here`: ``cores`` is what :func:`available_cores` gave before it."""
    _apply(None, cores)


@contextmanager
def pinned_here(cores: list[int]) -> Iterator[list[int]]:
    """Pin this process's threads to ``cores`` for the block (no torch change), then restore the affinity
    this process had (threads started inside the block keep ``cores``)."""
    before = available_cores()
    pinned = _set_affinity(None, cores)
    try:
        yield pinned
    finally:
        if pinned:
            _apply(None, before)
