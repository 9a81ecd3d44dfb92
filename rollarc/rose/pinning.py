"""Pin an actor's process to its cores, so serving and dedicated rollout never share one (``rollarc bench rose``).

torch's intra-op threads are set to the number of cores, and the CPU affinity of every thread of the process
to those cores where the OS allows it (Linux ``sched_setaffinity``; elsewhere only the thread count is set). A
Ray actor's process already runs several threads when its constructor starts (the core worker's, the event
loop's), so each one is pinned, not only the caller; threads started later inherit the affinity.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

TASKS = Path("/proc/self/task")  # Linux: one entry per thread of this process


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _threads() -> list[int]:
    """This process's thread ids (0, the calling thread, where they cannot be listed)."""
    return [int(entry.name) for entry in TASKS.iterdir()] if TASKS.is_dir() else [0]


def pin(cores: list[int]) -> list[int]:
    """Pin this process to ``cores`` (those that exist here); returns the cores it is pinned to ([] if not)."""
    usable = [c for c in cores if c in available_cores()]
    torch.set_num_threads(max(1, len(usable) or len(cores)))
    if not usable or not hasattr(os, "sched_setaffinity"):
        return []
    try:
        for thread in _threads():
            try:
                os.sched_setaffinity(thread, usable)
            except ProcessLookupError:  # the thread ended while we listed them
                continue
    except OSError:  # a container may forbid it; the thread count still holds
        return []
    return usable
