"""The RL learning-rate schedule against hand-computed factors; the trainer follows it and reports its signal."""

from __future__ import annotations

import pytest
import torch

from rollarc.agent.chat import ChatRenderer
from rollarc.algo.config import LossConfig
from rollarc.algo.lr_schedule import lr_multiplier
from rollarc.config import TrainConfig
from rollarc.config.io import ConfigError, validate
from rollarc.models import new_policy
from rollarc.train.policy_trainer import PolicyTrainer
from tests.unit.test_policy_trainer import make_traj

# warmup 2, 6 steps, floor 0.1. Cosine at p = 1/4, 1/2, 3/4: 0.1 + 0.45·(1 + cos πp) = 0.868198, 0.55, 0.231802.
COSINE = [0.5, 1.0, 0.868198, 0.55, 0.231802, 0.1]
# Linear at the same p: 0.1 + 0.9·(1 − p) = 0.775, 0.55, 0.325.
LINEAR = [0.5, 1.0, 0.775, 0.55, 0.325, 0.1]


@pytest.mark.parametrize("decay, expected", [("cosine", COSINE), ("linear", LINEAR), ("constant", [0.5] + [1.0] * 5)])
def test_warmup_then_decay_to_the_floor_on_the_last_step(decay, expected):
    got = [lr_multiplier(step, warmup_steps=2, total_steps=6, decay=decay, min_ratio=0.1) for step in range(6)]
    assert got == pytest.approx(expected, abs=1e-6)


def test_without_warmup_the_first_step_already_decays_and_steps_past_the_end_stay_at_the_floor():
    got = [lr_multiplier(step, warmup_steps=0, total_steps=4, decay="linear", min_ratio=0.0) for step in range(6)]
    assert got == pytest.approx([0.75, 0.5, 0.25, 0.0, 0.0, 0.0])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_ratio"):
        lr_multiplier(0, 0, 4, "linear", 1.5)
    with pytest.raises(ValueError, match="decay='exp'"):
        lr_multiplier(0, 0, 4, "exp", 0.1)  # type: ignore[arg-type]


def test_the_trainer_steps_at_the_scheduled_lr():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(
        model,
        LossConfig(),
        lr=1e-3,
        pad_id=tok.pad_token_id,
        warmup_steps=1,
        lr_decay="linear",
        total_steps=3,
        lr_min_ratio=0.5,
    )
    group = [make_traj(renderer, f"r{i}", "R", 1.0) for i in range(2)]  # all-equal rewards: the weights stay put
    lrs = [trainer.train_step([group])["lr"] for _ in range(3)]
    # step 0 ends the warmup (1.0); then p = 1/2 and 1: 0.5 + 0.5·(1 − p) = 0.75, 0.5
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4], rel=1e-9)
    assert torch.isfinite(torch.tensor(lrs)).all()


def test_a_floor_without_a_decay_is_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"lr_min_ratio=0\.2 has no effect with lr_decay='constant'"):
        validate(TrainConfig, {"lr_min_ratio": 0.2}, source="train")
    cfg = validate(TrainConfig, {"lr_decay": "cosine", "lr_min_ratio": 0.2}, source="train")
    assert (cfg.lr_decay, cfg.lr_min_ratio) == ("cosine", 0.2)


def test_the_step_reports_the_share_of_groups_with_a_signal():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-3, pad_id=tok.pad_token_id)
    same = [make_traj(renderer, f"s{i}", "R", 1.0) for i in range(2)]
    mixed = [make_traj(renderer, "m0", "R", 1.0), make_traj(renderer, "m1", "D", 0.0)]
    failed = [make_traj(renderer, f"f{i}", "D", 0.0) for i in range(2)]
    assert trainer.train_step([same, mixed, failed, mixed])["signal_groups_frac"] == 0.5
