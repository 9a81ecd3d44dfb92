"""The progress judge: fixed-length left padding, batch invariance, atomic save/load, and that it learns."""

from __future__ import annotations

import json

import pytest
import torch

from rollarc.rewards.data import Example
from rollarc.rewards.judge import JudgeSpec, ProgressJudge, load_judge, read_meta, save_judge, tokenizer_fingerprint
from rollarc.rewards.train import evaluate, fit

SPEC = JudgeSpec(vocab_size=20, pad_id=0, context_tokens=6, d_model=16, heads=2, layers=1)


def judge(seed: int = 0) -> ProgressJudge:
    torch.manual_seed(seed)
    return ProgressJudge(SPEC).eval()


def test_sequences_are_right_aligned_behind_the_classification_token():
    ids, pad = judge().encode_batch([[5, 6], list(range(1, 10))])
    cls = SPEC.cls_id
    assert ids[0].tolist() == [0, 0, 0, 0, cls, 5, 6]
    assert pad[0].tolist() == [True] * 4 + [False] * 3
    assert ids[1].tolist() == [cls, 4, 5, 6, 7, 8, 9]  # only the last context_tokens are read
    assert not pad[1].any()
    empty_ids, empty_pad = judge().encode_batch([[]])
    assert empty_ids[0, -1] == cls and empty_pad[0].sum() == SPEC.length - 1


def test_out_of_vocabulary_ids_are_named():
    with pytest.raises(ValueError, match="token id 25 is outside the judge's vocabulary of 20"):
        judge().encode_batch([[1, 25]])


def test_scores_do_not_depend_on_the_batch():
    model = judge()
    a, b, c = [3, 4, 5], [7] * 6, []
    together = model.score([a, b, c])
    alone = [model.score([x])[0] for x in (a, b, c)]
    assert together == pytest.approx(alone, abs=1e-6)
    assert all(0.0 <= s <= 1.0 for s in together)
    assert model.score([]) == []


def test_save_is_atomic_and_load_restores_scores(tmp_path):
    model = judge()
    path = save_judge(model, tmp_path / "judge", {"heldout": {"success_accuracy": 0.5}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["judge"]  # no temporary directory left behind
    assert read_meta(path)["heldout"]["success_accuracy"] == 0.5
    assert json.loads((path / "judge.json").read_text())["spec"]["context_tokens"] == 6
    loaded = load_judge(path)
    assert loaded.score([[1, 2, 3]]) == pytest.approx(model.score([[1, 2, 3]]), abs=1e-7)
    with pytest.raises(FileNotFoundError, match="rollarc reward train"):
        read_meta(tmp_path / "nothing")


def test_tokenizer_fingerprint_depends_on_ids():
    assert tokenizer_fingerprint({"a": 0, "b": 1}) == tokenizer_fingerprint({"b": 1, "a": 0})
    assert tokenizer_fingerprint({"a": 0, "b": 1}) != tokenizer_fingerprint({"a": 1, "b": 0})


def synthetic(count: int, seed: int) -> list[Example]:
    """Success iff the last token is 7; progress = number of 3s in the sequence / 4."""
    g = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(count):
        body = torch.randint(1, 7, (4,), generator=g).tolist()
        success = bool(i % 2)
        examples.append(
            Example(
                tokens=[*body, 7 if success else 8],
                progress=1.0 if success else body.count(3) / 4,
                success=success,
                task="synthetic",
                seed=i,
                epsilon=0.0,
            )
        )
    return examples


def test_fit_learns_a_learnable_rule():
    torch.manual_seed(0)
    model = ProgressJudge(SPEC)
    before = evaluate(model, synthetic(100, 1))
    losses = fit(model, synthetic(400, 0), steps=150, batch_size=32, lr=3e-3, seed=0, log=lambda _: None)
    after = evaluate(model, synthetic(100, 1))
    assert losses[-1] < losses[0]
    assert after["majority_class_accuracy"] == 0.5
    assert after["success_accuracy"] == 1.0 and before["success_accuracy"] < 0.9
    assert after["progress_mae"] < before["progress_mae"]
