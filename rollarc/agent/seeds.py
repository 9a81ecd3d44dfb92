"""Seed derivations shared by the Ray controller and the in-process reference loop.

Every seed of a training trajectory is a pure function of the config seed and the group's global index,
never of timing, worker placement or batch composition, so synchronous mode is reproducible and the
in-process reference loop (``rollarc.train.reference_loop``) plays exactly the trajectories the runtime plays.
"""

from __future__ import annotations

import hashlib


def derived_seed(seed: int, purpose: str, index: int) -> int:
    """A seed for ``purpose`` (e.g. "sampling") of group ``index``; multiples of 1000 leave room for ``+ j``."""
    digest = hashlib.blake2b(f"{seed}:{purpose}:{index}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "little") * 1000


def group_sampling_seed(seed: int, index: int) -> int:
    """Sampling seed of group ``index``; trajectory ``j`` of the group samples with ``group_sampling_seed + j``."""
    return derived_seed(seed, "sampling", index)


def trajectory_latency_seed(sampling_seed: int | None, traj_id: str, env_seed: int, fallback: int) -> int:
    """Seed of one trajectory's injected env latency and failures (``envs.latency``).

    A training trajectory's draws depend only on its own sampling seed and id, never on the order in which
    the trajectories sharing a worker happen to step; ``fallback`` (the worker's seed) is mixed in only for
    episodes without a sampling seed (held-out evaluation).
    """
    key = f"{sampling_seed}:{traj_id}:{env_seed}" if sampling_seed is not None else f"{fallback}:{traj_id}:{env_seed}"
    digest = hashlib.blake2b(f"latency:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
