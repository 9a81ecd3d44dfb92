"""The RL training step: it moves probability toward high-advantage actions, and refuses NaN."""

from __future__ import annotations

import pytest
import torch

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.algo.config import LossConfig
from rollarc.models import new_policy
from rollarc.train.batch import build_batch, mask_stale_tokens
from rollarc.train.policy_trainer import NonFiniteError, PolicyTrainer


def make_traj(
    renderer: ChatRenderer, traj_id: str, action: str, reward: float, model=None, version: int = 0
) -> Trajectory:
    """A one-turn trajectory; its behaviour log-probs are the model's own (on-policy), or -1 without a model."""
    seg = Segment()
    prompt = renderer.prompt_ids([Message("user", "PFH\nFFG")])
    seg.extend_context(prompt)
    reply = renderer.encode_reply(action)
    logps = [-1.0] * len(reply)
    if model is not None:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + reply])).logits[0, len(prompt) - 1 : -1]
        logps = torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None])[:, 0].tolist()
    seg.extend_generated(reply, logps, [version] * len(reply))
    return Trajectory(traj_id=traj_id, task="t", seed=0, segments=[seg], reward=reward)


def action_logprob(model, renderer: ChatRenderer, action: str) -> float:
    prompt = renderer.prompt_ids([Message("user", "PFH\nFFG")])
    target = renderer.tokenizer.convert_tokens_to_ids(action)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    return float(torch.log_softmax(logits, -1)[target])


@pytest.mark.parametrize("correction", ["none", "tis", "decoupled_ppo"])
def test_step_moves_probability_toward_the_rewarded_action(correction):
    torch.manual_seed(0)
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(correction=correction), lr=3e-3, pad_id=tok.pad_token_id)
    before_r, before_d = action_logprob(model, renderer, "R"), action_logprob(model, renderer, "D")
    for _ in range(3):
        group = [make_traj(renderer, f"r{i}", "R", 1.0, model) for i in range(2)] + [
            make_traj(renderer, f"d{i}", "D", 0.0, model) for i in range(2)
        ]
        stats = trainer.train_step([group])
    assert trainer.version == 3 and stats["version"] == 3 and stats["target_tokens"] == 8
    assert action_logprob(model, renderer, "R") > before_r + 0.1
    assert action_logprob(model, renderer, "D") < before_d - 0.1


def test_zero_advantage_group_leaves_the_weights_unchanged():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-2, pad_id=tok.pad_token_id)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.train_step([[make_traj(renderer, "a", "R", 1.0), make_traj(renderer, "b", "D", 1.0)]])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_nan_reward_refuses_the_step_and_keeps_the_weights():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-2, pad_id=tok.pad_token_id)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NonFiniteError, match="non-finite reward"):
        trainer.train_step([[make_traj(renderer, "a", "R", float("nan")), make_traj(renderer, "b", "D", 0.0)]])
    assert trainer.version == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_micro_batches_give_the_same_gradient_as_one_batch():
    torch.manual_seed(0)
    results = []
    for budget in (10_000, 20):
        model, tok = new_policy("nano", max_position_embeddings=64, seed=1)
        renderer = ChatRenderer(tok)
        trainer = PolicyTrainer(model, LossConfig(), lr=1e-2, pad_id=tok.pad_token_id, micro_batch_tokens=budget)
        group = [make_traj(renderer, f"t{i}", a, r) for i, (a, r) in enumerate([("R", 1.0), ("D", 0.0), ("U", 0.5)])]
        trainer.train_step([group])
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_staleness_of_trained_tokens_is_reported():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-3, pad_id=tok.pad_token_id, version=5)
    stats = trainer.train_step(
        [[make_traj(renderer, "a", "R", 1.0, version=3), make_traj(renderer, "b", "D", 0.0, version=5)]]
    )
    assert stats["token_staleness_max"] == 2.0 and stats["token_staleness_min"] == 0.0 and trainer.version == 6


def test_nan_loss_refuses_the_step_and_keeps_the_weights():
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-2, pad_id=tok.pad_token_id)
    group = [make_traj(renderer, "a", "R", 1.0), make_traj(renderer, "b", "D", 0.0)]
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")  # the forward pass now yields NaN logits
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NonFiniteError, match="the step is refused"):
        trainer.train_step([group])
    assert trainer.version == 0
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) or torch.isnan(before[k]).any() for k in before)
    assert all(torch.equal(torch.nan_to_num(before[k]), torch.nan_to_num(after[k])) for k in before)


@pytest.mark.parametrize("correction", ["none", "decoupled_ppo"])
def test_deduplicated_rows_give_exactly_the_same_update(correction):
    """Identical rows share one forward pass; each keeps its own advantage and behaviour log-prob."""
    results = []
    for dedup in (False, True):
        model, tok = new_policy("nano", max_position_embeddings=64, seed=4)
        renderer = ChatRenderer(tok)
        trainer = PolicyTrainer(
            model,
            LossConfig(correction=correction),
            lr=1e-2,
            pad_id=tok.pad_token_id,
            micro_batch_tokens=40,
            dedup=dedup,
        )
        # plain SGD: Adam's first step is about lr * sign(grad), which would amplify float rounding
        trainer.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
        group = [
            make_traj(renderer, f"t{i}", a, r)
            for i, (a, r) in enumerate([("R", 1.0), ("R", 0.0), ("D", 0.5), ("R", 1.0), ("U", 0.0), ("D", 0.2)])
        ]
        group[1].segments[0].logprobs[-1] = -3.0  # same tokens as t0, different behaviour log-prob
        stats = trainer.train_step([group])
        results.append((torch.cat([p.detach().flatten() for p in model.parameters()]), stats))
    (plain, plain_stats), (dedup_params, dedup_stats) = results
    assert dedup_stats["unique_rows_frac"] == pytest.approx(3 / 6)
    assert plain_stats["unique_rows_frac"] == 1.0
    assert torch.allclose(plain, dedup_params, atol=1e-6)
    assert dedup_stats["loss"] == pytest.approx(plain_stats["loss"], abs=1e-6)


def test_a_resumed_trainer_gets_the_original_kl_reference_back(tmp_path):
    """Regression: a resumed run builds its trainer from the checkpoint's policy, so its KL reference was a copy
    of the resumed weights; the checkpoint now holds the original reference and the resume loads it."""
    torch.manual_seed(0)
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = PolicyTrainer(model, LossConfig(kl_coef=0.5), lr=1e-2, pad_id=tok.pad_token_id)
    group = [make_traj(renderer, "r", "R", 1.0, model), make_traj(renderer, "d", "D", 0.0, model)]
    trainer.train_step([group])
    trainer.save_reference(tmp_path / "reference.safetensors")
    resumed = PolicyTrainer(model, LossConfig(kl_coef=0.5), lr=1e-2, pad_id=tok.pad_token_id)  # from trained weights
    assert resumed.ref_model is not None
    assert not all(torch.equal(original[k], v) for k, v in resumed.ref_model.state_dict().items())
    resumed.load_reference(tmp_path / "reference.safetensors")
    assert all(torch.equal(original[k], v) for k, v in resumed.ref_model.state_dict().items())
    no_kl = PolicyTrainer(model, LossConfig(), lr=1e-2, pad_id=tok.pad_token_id)
    no_kl.load_reference(tmp_path / "missing.safetensors")  # no reference to restore: nothing to do
    with pytest.raises(FileNotFoundError, match="holds no KL reference"):
        resumed.load_reference(tmp_path / "missing.safetensors")


def spanning_traj(traj_id: str, versions: list[list[int]], reward: float) -> Trajectory:
    """One segment: a prompt, then one reply per entry of ``versions`` (each token its own version), env tokens between."""
    seg = Segment()
    seg.extend_context([5, 6, 7])
    for turn in versions:
        seg.extend_generated([10 + v for v in turn], [-1.0] * len(turn), turn)
        seg.extend_context([8, 9])
    return Trajectory(traj_id=traj_id, task="t", seed=0, segments=[seg], reward=reward)


def test_a_group_spanning_k_plus_2_versions_trains_with_only_its_old_tokens_masked():
    k, version = 1, 5
    # three turns under versions 2 (3 old: > k), 3 (> k) and 4..5 (within k; the last turn mixes versions)
    group = [
        spanning_traj("a", [[2, 2], [3], [4, 5, 5]], 1.0),
        spanning_traj("b", [[3, 3, 3], [4], [5]], 0.0),
    ]
    batch = build_batch([group], "grpo", 1e-6, pad_id=0)
    before = batch.loss_mask.clone()
    masked = mask_stale_tokens(batch, version, k)
    old = (before != 0) & (version - batch.versions > k)
    assert masked == int(old.sum()) == 2 + 1 + 3  # a: 2 + 1 tokens, b: 3
    assert torch.equal(batch.loss_mask, torch.where(old, 0.0, before))  # only the old tokens left the loss
    kept = batch.versions[batch.loss_mask.bool()]
    assert sorted(kept.tolist()) == [4, 4, 5, 5, 5]
    assert int((version - kept).max()) <= k  # no unmasked trained token is older than k
    assert mask_stale_tokens(batch, version, None) == 0  # no bound (the reference step): nothing masked


def test_the_trainer_masks_stale_tokens_and_counts_them():
    torch.manual_seed(0)
    model, tok = new_policy("nano", max_position_embeddings=64)
    renderer = ChatRenderer(tok)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-3, pad_id=tok.pad_token_id, version=5, max_staleness=1)
    group = [make_traj(renderer, "a", "R", 1.0, version=3), make_traj(renderer, "b", "D", 0.0, version=5)]
    stats = trainer.train_step([group])
    target = len(renderer.encode_reply("R"))  # "a"'s reply, all of version 3: 2 > k
    assert stats["masked_stale_tokens"] == target and stats["masked_token_frac"] == target / (2 * target)
    assert stats["token_staleness_max"] == 0.0 and stats["target_tokens"] == target
