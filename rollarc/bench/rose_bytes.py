"""Weight bytes into the borrowed site, measured on the path users run: a short ``rollarc train`` with ``harvest:``.

``measured_cross_site_bytes`` runs ``configs/harvest.yaml`` (two co-serving replicas, bf16 sparse deltas) for a
few steps at the config's training learning rate (no warm-up ramp, no decay: every step is taken at
``train.lr``), without evaluations or checkpoints, and reads back from the run's ``metrics.jsonl`` what the
training path counted: the encoded bytes sent across the site boundary (one copy of each update, in shards)
and forwarded inside the site, per step. ``rollarc bench rose`` reports its figure from here, so the headline
is measured, not computed from the codec on a synthetic update.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollarc.bench.report_file import REPO_ROOT
from rollarc.config import load_train_config
from rollarc.runtime.entry import run_training

CONFIG = REPO_ROOT / "configs" / "harvest.yaml"
STEPS = {True: 3, False: 6}  # quick: 3 steps; otherwise 6
# A shorter warm start (enough for non-zero advantages), a shorter SLO calibration (the bytes do not depend on it) and
# a quarter of the config's 16 groups a step (a smoke run: fewer tokens touch fewer weights, so no more bytes).
QUICK_SFT = [
    "sft.steps=20",
    "sft.episodes=200",
    "harvest.calibration_s=5.0",
    "harvest.calibration_min_requests=10",
    "train.groups_per_step=4",
]
RUN_NAME = "rose-bytes"


def overrides(steps: int, runs: Path, quick: bool) -> list[str]:
    """The config's run, cut to ``steps`` RL steps at ``train.lr``, writing only under ``runs``."""
    return [
        f"name={RUN_NAME}",
        f"train.steps={steps}",
        "train.warmup_steps=0",  # the config ramps up over 10 steps: the bytes would be those of a smaller lr
        "train.lr_decay=constant",
        "train.eval_every=0",
        "train.eval_episodes=0",
        "train.checkpoint_every=0",
        f"sft.checkpoint={runs / 'sft'}",
        *(QUICK_SFT if quick else []),
        f"run.dir={runs}",
        "run.progress=false",
    ]


def bytes_per_step(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Medians over the steps of a ``harvest:`` run's ``metrics.jsonl`` rows, and one fp32 copy's bytes."""
    if not rows:
        raise ValueError("the harvest run wrote no metrics rows: no step finished")
    missing = [key for key in ("cross_site_bytes", "in_site_bytes", "full_copy_bytes") if key not in rows[0]]
    if missing:
        raise ValueError(f"metrics rows lack {missing}: was the run made without `harvest:`?")
    return {
        "cross_site_bytes_per_step": float(statistics.median(r["cross_site_bytes"] for r in rows)),
        "in_site_bytes_per_step": float(statistics.median(r["in_site_bytes"] for r in rows)),
        "full_copy_bytes": float(rows[0]["full_copy_bytes"]),
        "steps": float(len(rows)),
    }


def measured_cross_site_bytes(quick: bool) -> dict[str, float]:
    """Run the short ``harvest:`` training and return its measured bytes per step (``bytes_per_step``) and its lr.

    Keys: ``cross_site_bytes_per_step`` (median over steps), ``in_site_bytes_per_step`` (median),
    ``full_copy_bytes`` (one fp32 copy of the weights), ``steps`` and ``lr``. Raises if the run fails.
    """
    with tempfile.TemporaryDirectory(prefix="rollarc-rose-bytes-") as tmp:
        runs = Path(tmp)
        cfg = load_train_config(CONFIG, overrides(STEPS[quick], runs, quick))
        code = run_training(cfg)
        if code != 0:
            raise RuntimeError(f"the harvest run ({CONFIG.name}, {STEPS[quick]} steps) exited with code {code}")
        (run,) = [p for p in runs.iterdir() if p.is_dir() and p.name.startswith(f"{RUN_NAME}-")]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {**bytes_per_step(rows), "lr": cfg.train.lr}
