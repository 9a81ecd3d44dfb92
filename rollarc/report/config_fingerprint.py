"""A run's config fingerprint, and which config changes a resume may make.

A run directory records the resolved config it started with (``config.yaml``) and its fingerprint
(``fingerprint.json``: the SHA-256 of the canonical JSON of that config). ``resume=RUN_DIR`` compares the
config it is given with the run's: a run trained on one task must not go on training another task on its
checkpoint and append to its metrics. Only the keys in :data:`SAFE_TO_CHANGE` may differ: how long the run
goes on, how often it evaluates and checkpoints, what it logs, and how many threads and CPUs it uses.
None of them changes what a training step computes. Everything else differing refuses the resume, with the
dotted keys that differ.

Pure functions on plain dicts (the config's ``model_dump(mode="json", by_alias=True)``): no I/O here.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from typing import Any

from rollarc.config.io import ConfigError

# Dotted config keys (``fnmatch`` patterns; list items are numbered: ``cluster.roles.rollout.0.threads``) that a
# resumed run may change. Each changes neither a training step's maths nor the sequence of groups it trains.
SAFE_TO_CHANGE: tuple[str, ...] = (
    "resume",  # the resumed run names the directory; the run itself did not
    "train.steps",  # train longer (or stop sooner)
    "train.eval_every",  # held-out evaluation runs on its own seeds and never feeds training
    "train.eval_episodes",
    "train.eval_seed_base",
    "train.eval_temperature",
    "train.checkpoint_every",
    "run.dir",  # the run directory is given by resume=, not made under run.dir
    "run.progress",
    "run.tensorboard",
    "run.trackers",
    "run.project",
    "cluster.address",  # where Ray runs, not what it computes
    "cluster.num_cpus",
    "cluster.include_dashboard",
    "cluster.dashboard_host",
    "cluster.pools.*.count",  # room for more (or fewer) replicas
    "cluster.roles.train.replicas",  # FSDP ranks: DCP reshards the checkpoint (docs/fsdp.md); the gradient is the same
    "cluster.roles.train.threads",
    "cluster.roles.env.threads",
    "cluster.roles.reward.threads",
    "cluster.roles.rollout.*.threads",
    "engine.num_threads",
)


def canonical_json(config: dict[str, Any]) -> str:
    """The config as one canonical JSON string (sorted keys, no spaces); ``resume`` left out."""
    return json.dumps({k: v for k, v in config.items() if k != "resume"}, sort_keys=True, separators=(",", ":"))


def fingerprint(config: dict[str, Any]) -> str:
    """SHA-256 (hex) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves by dotted key: ``{"a": {"b": [1, 2]}}`` -> ``{"a.b.0": 1, "a.b.1": 2}``; an empty dict or list is a leaf."""
    if isinstance(config, dict) and config:
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in config.items()]
    elif isinstance(config, list) and config:
        items = [(str(i), v) for i, v in enumerate(config)]
    else:
        return {prefix: config}
    flat: dict[str, Any] = {}
    for key, value in items:
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return flat


MISSING = "<absent>"


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old value, new value) for every leaf that differs (``<absent>`` where one side lacks it)."""
    a, b = flatten(old), flatten(new)
    return {
        key: (a.get(key, MISSING), b.get(key, MISSING))
        for key in sorted(set(a) | set(b))
        if a.get(key, MISSING) != b.get(key, MISSING)
    }


def is_safe_to_change(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in SAFE_TO_CHANGE)


def check_resume(old: dict[str, Any], new: dict[str, Any], run_dir: str) -> dict[str, tuple[Any, Any]]:
    """The changes a resume of ``run_dir`` makes (all safe), or a one-line :class:`ConfigError` naming the others."""
    changes = config_diff(old, new)
    unsafe = [key for key in changes if not is_safe_to_change(key)]
    if unsafe:
        shown = ", ".join(f"{key} ({_short(changes[key][0])} -> {_short(changes[key][1])})" for key in unsafe[:8])
        more = f" and {len(unsafe) - 8} more" if len(unsafe) > 8 else ""
        raise ConfigError(
            f"resume={run_dir}: the config differs from the run's in {shown}{more}; a resume may change only "
            f"{', '.join(SAFE_TO_CHANGE[1:])} (start a new run for another config)"
        )
    return changes


def _short(value: Any) -> str:
    text = json.dumps(value) if value is not MISSING else MISSING
    return text if len(text) <= 40 else text[:37] + "..."
