"""pi_prox's log-probs from the loss forward when a step makes one optimiser step (algo.proximal: auto): the same
update as a separate no-grad forward gives, one forward fewer; kept separate with several optimiser steps or dropout."""

from __future__ import annotations

import copy

import pytest
import torch
from pydantic import ValidationError

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.algo.config import LossConfig
from rollarc.models import new_policy
from rollarc.train.policy_trainer import PolicyTrainer
from rollarc.train.proximal import has_dropout, prox_from_loss_forward


def stale_traj(renderer: ChatRenderer, traj_id: str, action: str, reward: float, behav_logp: float) -> Trajectory:
    """One turn whose behaviour log-probs are not the current model's: the correction's weights are not 1."""
    seg = Segment()
    seg.extend_context(renderer.prompt_ids([Message("user", f"PFH\nFFG {traj_id}")]))
    reply = renderer.encode_reply(action)
    seg.extend_generated(reply, [behav_logp] * len(reply), [0] * len(reply))
    return Trajectory(traj_id=traj_id, task="t", seed=0, segments=[seg], reward=reward)


def groups(renderer: ChatRenderer) -> list[list[Trajectory]]:
    return [
        [stale_traj(renderer, f"g{g}r{i}", "RD"[i % 2], float(i % 2 == g % 2), -0.5 - 0.4 * i) for i in range(4)]
        for g in range(3)
    ]


def forward_count(model: torch.nn.Module) -> list[int]:
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("correction", ["tis", "decoupled_ppo"])
def test_one_optimiser_step_takes_pi_prox_from_the_loss_forward_and_updates_alike(correction):
    torch.manual_seed(0)
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    batch = groups(renderer)
    results = {}
    for proximal in ("auto", "recompute"):
        twin = copy.deepcopy(model)
        calls = forward_count(twin)
        trainer = PolicyTrainer(
            twin, LossConfig(correction=correction, proximal=proximal), lr=1e-2, pad_id=tok.pad_token_id, dedup=False
        )
        assert trainer.prox_from_loss == (proximal == "auto")
        stats = trainer.train_step(batch)
        results[proximal] = (stats, dict(twin.state_dict()), calls[0])
    (auto, auto_weights, auto_calls), (full, full_weights, full_calls) = results["auto"], results["recompute"]
    assert (auto["prox_forwards"], full["prox_forwards"]) == (0, 1)
    assert full_calls - auto_calls >= 1  # the forward that recomputed pi_prox's log-probs is gone
    for key in ("loss", "grad_norm"):
        assert auto[key] == pytest.approx(full[key], rel=1e-5, abs=1e-7), key
    moved = [k for k in full_weights if not torch.equal(full_weights[k], model.state_dict()[k])]
    assert moved  # the step did change the weights, so the comparison below compares updates
    for key, value in full_weights.items():
        assert torch.allclose(auto_weights[key], value, atol=1e-6, rtol=0), key


@pytest.mark.parametrize(("minibatches", "epochs"), [(2, 1), (1, 2)])
def test_several_optimiser_steps_per_step_keep_the_separate_forward(minibatches, epochs):
    model, tok = new_policy("nano", max_position_embeddings=64)
    trainer = PolicyTrainer(
        model, LossConfig(correction="tis"), lr=1e-3, pad_id=tok.pad_token_id, minibatches=minibatches, epochs=epochs
    )
    assert not trainer.prox_from_loss
    assert trainer.train_step(groups(ChatRenderer(tok)))["prox_forwards"] == 1


def test_no_correction_needs_no_pi_prox_and_refuses_a_proximal_setting():
    model, tok = new_policy("nano", max_position_embeddings=64)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-3, pad_id=tok.pad_token_id)
    assert trainer.train_step(groups(ChatRenderer(tok)))["prox_forwards"] == 0
    with pytest.raises(ValidationError, match="proximal='recompute' has no effect"):
        LossConfig(correction="none", proximal="recompute")


def test_dropout_anywhere_keeps_the_separate_forward():
    model, _ = new_policy("nano", max_position_embeddings=64)
    assert not has_dropout(model)
    assert prox_from_loss_forward(model, LossConfig(correction="tis"), 1, 1)
    with_module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
    assert has_dropout(with_module) and not has_dropout(torch.nn.Sequential(torch.nn.Dropout(0.0)))
    attention = copy.deepcopy(model)
    attention.config.attention_dropout = 0.1  # Hugging Face applies it functionally: no module to find
    assert has_dropout(attention)
    assert not prox_from_loss_forward(attention, LossConfig(correction="tis"), 1, 1)
    model.config.classifier_dropout = None
    assert not has_dropout(model)
