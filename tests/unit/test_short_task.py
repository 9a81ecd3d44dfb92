"""The short single-turn task of ``rollarc bench step`` and the in-process HF-``generate`` GRPO loop it is measured against."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from rollarc.config import load_train_config
from rollarc.models import new_policy
from rollarc.models.checkpoint import save_policy
from rollarc.train.generate_loop import _lengths_to_eos, run_generate_loop
from rollarc.train.policy_trainer import PolicyTrainer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from reverse_word_env import ReverseWordEnv  # noqa: E402


def test_reverse_word_rewards_exact_partial_and_invalid_replies():
    env = ReverseWordEnv(min_len=4, max_len=8)
    word, _ = env.reset(seed=3)
    assert 4 <= len(word) <= 8 and word.isalpha() and env.reset(seed=3)[0] == word  # the seed fixes the word
    assert env.expert_action() == word[::-1]
    _, reward, terminated, _, info = env.step(word[::-1])
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.reset(seed=3)
    wrong_last = word[::-1][:-1] + ("a" if word[0] != "a" else "b")
    _, reward, _, _, info = env.step(wrong_last)
    assert reward == pytest.approx(0.5 * (len(word) - 1) / len(word)) and not info["success"]
    env.reset(seed=3)
    _, reward, _, _, info = env.step("AB1")
    assert reward == -0.1 and info["invalid_action"]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("x")


def test_lengths_run_to_the_first_eos_inclusive():
    tokens = torch.tensor([[5, 6, 0, 7], [5, 5, 5, 5], [0, 0, 3, 3]])
    assert _lengths_to_eos(tokens, eos=0) == [3, 4, 1]


@pytest.fixture
def nano_policy(tmp_path):
    model, tokenizer = new_policy("nano", 64, seed=0)
    save_policy(model, tokenizer, tmp_path / "policy")
    return str(tmp_path / "policy")


def test_generate_loop_records_the_logprobs_the_trainer_recomputes(nano_policy, monkeypatch):
    """Behaviour log-probs from generate's scores equal the trainer's own log-probs of the same tokens."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    cfg = load_train_config(
        str(ROOT / "configs/short_task.yaml"),
        ["model.preset=nano", "train.steps=1", "train.groups_per_step=2", "train.group_size=3"],
    )
    checked = []
    original = PolicyTrainer.train_step

    def spy(self, groups):
        """Before the step changes the weights: recompute every sampled token's log-prob with the sampler's model."""
        assert [len(g) for g in groups] == [3, 3] and [t.seed for g in groups for t in g] == [0, 0, 0, 1, 1, 1]
        for traj in (t for g in groups for t in g):
            (seg,) = traj.segments
            assert 1 <= sum(seg.assistant_mask) <= 12 and traj.num_turns == 1
            with torch.no_grad():
                logits = self.model(torch.tensor([seg.token_ids])).logits[0, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            for pos, (mask, behav) in enumerate(zip(seg.assistant_mask, seg.logprobs, strict=True)):
                if mask:
                    assert math.isclose(behav, logp[pos - 1, seg.token_ids[pos]].item(), abs_tol=1e-4)
                    checked.append(pos)
        return original(self, groups)

    monkeypatch.setattr(PolicyTrainer, "train_step", spy)
    result = run_generate_loop(cfg, nano_policy, threads=1)
    assert result.completions == 6 and len(result.steps) == 1 and set(result.phase_s) >= {"generate_s", "train_s"}
    assert len(checked) >= 6
