"""Every trainer is built from one mapping of the config (four copies had drifted: the baseline lost lr decay)."""

from __future__ import annotations

import inspect

from rollarc.config import load_train_config
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.trainer_options import trainer_options


def test_the_options_carry_the_config_and_name_only_trainer_parameters() -> None:
    cfg = load_train_config(
        "configs/quickstart.yaml", ["train.lr_min_ratio=0.25", "train.steps=7", "train.grad_clip=0.5", "seed=3"]
    )
    options = trainer_options(cfg, pad_id=11)
    assert (options["lr_decay"], options["lr_min_ratio"], options["total_steps"]) == ("cosine", 0.25, 7)
    assert (options["grad_clip"], options["pad_id"], options["seed"], options["warmup_steps"]) == (0.5, 11, 3, 10)
    assert set(options) <= set(inspect.signature(PolicyTrainer.__init__).parameters)
