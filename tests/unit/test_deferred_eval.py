"""Deferred held-out evaluations (train.eval_deferred): a snapshot's weights go into the policy exactly, or not at all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rollarc.config import load_train_config
from rollarc.config.io import ConfigError
from rollarc.runtime.deferred_eval import load_weights

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def test_load_weights_copies_every_tensor_bitwise():
    model, source = small_model(), small_model()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p))
    weights = {name: t.clone() for name, t in source.state_dict().items()}
    load_weights(model, weights)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda w: w.pop("1.bias"), "missing ['1.bias']"),
        (lambda w: w.update({"2.weight": torch.zeros(1)}), "unknown ['2.weight']"),
        (lambda w: w.update({"0.bias": torch.zeros(5)}), "shapes differ for ['0.bias']"),
    ],
)
def test_load_weights_refuses_weights_that_do_not_fit_and_changes_nothing(change, message):
    model = small_model()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    weights = {name: torch.ones_like(t) for name, t in model.state_dict().items()}
    change(weights)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_weights(model, weights)
    assert all(torch.equal(t, before[name]) for name, t in model.state_dict().items())


def test_eval_deferred_is_refused_off_the_builtin_engine_with_one_line():
    with pytest.raises(ConfigError, match=r"train\.eval_deferred scores snapshots on the built-in engine"):
        load_train_config(CONFIGS / "openai_backend.yaml", ["train.eval_deferred=true"])
    assert load_train_config(CONFIGS / "gentail.yaml", ["train.eval_deferred=true"]).train.eval_deferred
