"""The modes of ``rollarc bench async`` and what each is given: the overrides that make a mode (its loop, bound,
placement, correction), the smoke-run shrink, and the workload and set-up records published with the figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollarc.config import Config
from rollarc.envs.latency import LatencyModel

# A smoke run's shape: any workload, shrunk; the task-specific shrinks are in quick_overrides
QUICK = [
    "model.preset=nano",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=2",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_episodes=8",
]


IN_FLIGHT = ("finish", "abort", "continue")  # async.in_flight_update's values
SYNC_MODES = ("sync", "sync_full", "monolithic")  # the synchronous candidates for the baseline, in run order


def quick_overrides(cfg: Config) -> list[str]:
    """``QUICK`` plus each task's own shrink: a FrozenLake task on a 4x4 map in 8 turns, env latency 5x shorter."""
    out = [*QUICK, f"sft.checkpoint=artifacts/sft/bench-async-quick-{cfg.name}"]
    for i, task in enumerate(cfg.tasks):
        if task.latency.kind == "lognormal" and task.latency.median_s is not None:
            out.append(f"tasks.{i}.latency.median_s={task.latency.median_s / 5}")
        if task.env is not None and task.env.id == "frozen_lake":
            out += [f"tasks.{i}.env.kwargs.size=4", f"tasks.{i}.agent.max_turns={min(8, task.agent.max_turns)}"]
    return out


def no_latency(cfg: Config) -> list[str]:
    """Every task's env latency (and its injected failures) off."""
    return [f"tasks.{i}.latency={{kind: none}}" for i in range(len(cfg.tasks))]


def whole_machine(cfg: Config) -> list[str]:
    """Each role's torch threads = every unit of its pool: what a synchronous run, whose phases alternate, may use."""
    pools = cfg.cluster.pools
    train = cfg.cluster.roles.train
    rollout = [{**r.model_dump(mode="json"), "threads": int(pools[r.pool].count)} for r in cfg.cluster.roles.rollout]
    return [
        f"cluster.roles.train.threads={int(pools[train.pool].count)}",
        f"cluster.roles.rollout={json.dumps(rollout)}",
    ]


def no_correction(cfg: Config) -> list[str]:
    """``algo.correction: none``, and the correction's own settings back to their defaults (else an error)."""
    out = ["algo.correction=none"]
    fields = type(cfg.algo).model_fields
    for name in ("tis_cap", "decoupled_cap", "proximal"):
        if getattr(cfg.algo, name) != fields[name].default:
            out.append(f"algo.{name}={json.dumps(fields[name].default)}")
    return out


def modes(
    steps_k: list[int],
    monolithic: bool = True,
    in_flight: Sequence[str] = (),
    whole: Sequence[str] = (),
    uncorrected: Sequence[str] = ("algo.correction=none",),
    split_sync: bool = True,
) -> list[tuple[str, list[str]]]:
    """(label, overrides) per mode, in the order they run: sync (the config's placement), sync_full (``whole``
    machine per phase, ``uncorrected``), each k, each k again under each of ``in_flight`` (an
    ``async.in_flight_update`` value, label suffix ``_VALUE``), monolithic (``whole``, the config's correction)."""
    sync = ["async.mode=sync", "async.max_staleness=0"]
    out = [("sync", sync)] if split_sync else []
    out.append(("sync_full", [*sync, *whole, *uncorrected]))
    out += [(f"async_k{k}", ["async.mode=async", f"async.max_staleness={k}"]) for k in steps_k]
    out += [
        (f"async_k{k}_{value}", ["async.mode=async", f"async.max_staleness={k}", f"async.in_flight_update={value}"])
        for value in in_flight
        for k in steps_k
    ]
    if monolithic:
        out.append(("monolithic", [*sync, *whole]))
    return out


def mode_setup(cfg: Config) -> dict[str, Any]:
    """What one mode was given: its loop, bound, correction and threads (for the JSON and the README row)."""
    return {
        "async": cfg.async_.mode,
        "max_staleness": cfg.async_.max_staleness,
        "in_flight_update": cfg.async_.in_flight_update,
        "correction": cfg.algo.correction,
        "threads": {
            "train": cfg.cluster.roles.train.threads,
            "rollout": [r.threads for r in cfg.cluster.roles.rollout],
        },
    }


def workload(config_path: str, cfg: Config, latency_off: bool) -> dict[str, Any]:
    """The workload key: the config, and where its tail comes from (env latency, turns and reply lengths)."""
    parts = []
    latency = False
    for task in cfg.tasks:
        lat = task.latency
        model = LatencyModel(lat)
        if model.inert:
            env = "no env latency"
        else:
            latency = True
            env = (
                f"env latency {lat.kind} median {model.analytic_quantile(0.5):.3g} s, p99 "
                f"{model.analytic_quantile(0.99):.3g} s, {lat.failure_prob:.0%} of steps fail"
            )
        turns = task.agent
        parts.append(f"{task.name}: {env}; up to {turns.max_turns} turns of up to {turns.max_tokens_per_turn} tokens")
    return {
        "config": config_path,
        "name": cfg.name,
        "latency_off": latency_off,
        "env_latency": latency,  # whether any task waits on injected env latency
        "tail": "; ".join(parts),
        "about": header_comment(Path(config_path)),
    }


def header_comment(path: Path) -> str:
    """The config file's leading comment: its author's description of the workload."""
    lines = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def curve_modes(ks: list[int], in_flight: Sequence[str] = ()) -> list[str]:
    """The modes run over several seeds for time to target: every synchronous mode, k = 1 and 2, and their
    --in-flight variants."""
    seeded = [k for k in ks if k in (1, 2)]
    return [*SYNC_MODES, *(f"async_k{k}" for k in seeded), *(f"async_k{k}_{v}" for v in in_flight for k in seeded)]
