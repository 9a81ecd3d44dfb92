"""When the controller admits the next groups before a step's bookkeeping: never before an evaluation, a
checkpoint or an elastic change, nor after the last step (docs/performance.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rollarc.config import load_train_config
from rollarc.runtime.controller import Controller

ROOT = Path(__file__).resolve().parents[2]


def test_admits_early_except_at_evaluations_checkpoints_elastic_changes_and_the_end():
    cfg = load_train_config(
        str(ROOT / "configs/short_task.yaml"),
        [
            "train.steps=12",
            "train.eval_every=5",
            "train.checkpoint_every=4",
            "cluster.pools.compute.count=3",
            'elastic=[{"at_step": 7, "add": 1}]',
        ],
    )
    controller = SimpleNamespace(cfg=cfg)
    early = [v for v in range(1, 13) if Controller._admits_before_bookkeeping(controller, v)]  # type: ignore[arg-type]
    assert early == [1, 2, 3, 6, 9, 11]  # not 4, 8 (checkpoints), 5, 10 (evaluations), 7 (elastic), 12 (the end)
