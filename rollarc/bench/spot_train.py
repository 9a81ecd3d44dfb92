"""``rollarc bench spot``, part 4: SP recovery timed inside a training run, not in a harness.

It runs ``rollarc train`` on a t2i spot config with ``cluster.sp_degree > 1`` (``configs/t2i_spot_sp.yaml``)
under its preemption trace, and reads what that run timed itself (``summary.json``, ``spot``): every
regroup of an explorer's SP group after a member's notice (``sp_regroup_s``: survivors keep their weights),
and every cold start of an explorer's SP group (``sp_cold_start_s``: new processes that load the weights
from disk and form a group, as at a worker's start or a replacement node's). The speed-up is their medians'
ratio, the same figure the run's summary carries (``sp_recovery_speedup``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollarc.diffusion.config import load_t2i_config
from rollarc.runtime.t2i_entry import run_t2i


def recovery_in_run(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures of one finished run's ``summary.json``; a run with no regroup or no cold start has no ratio."""
    spot = summary.get("spot") or {}
    regroups, colds = spot.get("sp_regroup_s", []), spot.get("sp_cold_start_s", [])
    return {
        "regroup_s": regroups,
        "cold_start_s": colds,
        "recovery_speedup": spot.get("sp_recovery_speedup"),
        "preemptions": spot.get("preemptions", 0),
        "lost_jobs": spot.get("lost_jobs"),
        "duplicate_jobs": spot.get("duplicate_jobs"),
        "notice_source": spot.get("notice_source"),
        "drain_notices": spot.get("drain_notices", 0),
    }


def train_and_time_recovery(config: str, workdir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train ``config`` into ``workdir`` and return :func:`recovery_in_run` of that run."""
    cfg = load_t2i_config(config, [*(overrides or []), f"run.dir={workdir}", "run.tensorboard=false"])
    if cfg.cluster.sp_degree < 2 or not cfg.spot.enabled:
        raise ValueError(f"{config}: SP recovery needs cluster.sp_degree > 1 and spot.enabled")
    code = run_t2i(cfg)
    if code != 0:
        raise RuntimeError(f"rollarc train {config} failed with exit code {code}")
    (run_dir,) = [p for p in workdir.iterdir() if p.is_dir()]
    return {**recovery_in_run(json.loads((run_dir / "summary.json").read_text())), "sp_degree": cfg.cluster.sp_degree}
