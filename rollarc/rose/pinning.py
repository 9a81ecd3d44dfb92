"""Pin a worker process to its cores, so serving and dedicated rollout never share one.

torch's intra-op threads are set to the number of cores, and the process's CPU affinity to those cores
where the OS allows it (Linux ``sched_setaffinity``; elsewhere only the thread count is set). Call it
first thing in a worker process, before torch starts its thread pool, so every thread inherits it.
"""

from __future__ import annotations

import os

import torch


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pin(cores: list[int]) -> list[int]:
    """Pin this process to ``cores`` (those that exist here); returns the cores it is pinned to ([] if not)."""
    usable = [c for c in cores if c in available_cores()]
    torch.set_num_threads(max(1, len(usable) or len(cores)))
    if not usable or not hasattr(os, "sched_setaffinity"):
        return []
    try:
        os.sched_setaffinity(0, usable)
    except OSError:  # a container may forbid it; the thread count still holds
        return []
    return usable
