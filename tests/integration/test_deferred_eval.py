"""train.eval_deferred on a local Ray cluster: each step evaluation scores that step's exact weights, later, and
records the step's time (docs/async.md#evaluations-off-the-critical-path)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rollarc.rayproc.deadline import Deadlines
from rollarc.runtime import deferred_eval
from rollarc.runtime.deferred_eval import DeferredEvals
from rollarc.runtime.entry import run_training
from tests.integration.kill_during_run import train_killing
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow


def test_deferred_evaluations_score_the_snapshotted_weights_at_checkpoints_with_their_steps_time(
    nano_policy_dir, tmp_path, monkeypatch
):
    loaded: list[dict[str, torch.Tensor]] = []
    real_load = deferred_eval.load_weights

    def spy(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
        loaded.append({name: t.clone() for name, t in weights.items()})
        real_load(model, weights)

    monkeypatch.setattr(deferred_eval, "load_weights", spy)  # a spy in the driver (this process); product code calls it
    train = {"steps": 4, "eval_every": 1, "checkpoint_every": 2, "keep_last_checkpoints": 0, "eval_deferred": True}
    cfg = config(nano_policy_dir, tmp_path, train=train)
    assert run_training(cfg) == 0
    run = only_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    evals = summary["evals"]
    assert [e["label"] for e in evals] == ["before_rl", "step_1", "step_2", "step_3", "after_rl"]
    steps = evals[1:4]
    assert all(e["deferred"] for e in steps) and not any("deferred" in e for e in (evals[0], evals[4]))
    assert [e["scored_at"] for e in steps] == [2, 2, 4]  # at the checkpoint after step 2, and at the end
    ends = {r["step"]: r["wall_s"] for r in metrics(run)}
    assert [e["wall_s"] for e in steps] == [ends[1], ends[2], ends[3]]  # when the weights existed
    assert all(e["episodes"] == 4 for e in steps)

    # the scored weights are the steps' own: step 2's equal its checkpoint bitwise, and each step's differ
    assert len(loaded) == 3
    saved = load_file(run / "checkpoints" / "step_000002" / "policy" / "model.safetensors")
    assert all(torch.equal(loaded[1][name], saved[name]) for name in saved)
    assert not all(torch.equal(loaded[0][name], loaded[1][name]) for name in saved)

    # scored in the driver, the final weights give what the run's live evaluation after RL gave
    final = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step_000004" / "policy").state_dict()
    scorer = DeferredEvals(cfg, str(nano_policy_dir), Deadlines.of(cfg.cluster))
    again = scorer.score_weights(4, 0.0, final, 4)
    live = evals[4]
    assert (again["success"], again["reward"], again["episodes"]) == (live["success"], live["reward"], live["episodes"])


def test_a_lost_trainer_drops_the_lost_steps_snapshots_and_each_step_is_scored_once_from_its_redone_weights(
    nano_policy_dir, tmp_path
):
    """Regression guard for ``DeferredEvals.discard``: the trainer dies after step 3 is logged (its snapshot may be
    pending, its weights on the dead actor); the run restores its last checkpoint (step 2), redoes the lost steps and
    scores each step once, with the time of the step that stands (the last metrics row of that step)."""
    train = {"steps": 6, "eval_every": 1, "checkpoint_every": 2, "keep_last_checkpoints": 0, "eval_deferred": True}
    cfg = config(nano_policy_dir, tmp_path, train=train)
    assert train_killing(cfg, tmp_path, 3, "train-0") == (0, ["train-0"])
    run = only_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["trainer_restarts"] == 1 and summary["steps_lost"] >= 1
    evals = summary["evals"]
    assert [e["label"] for e in evals] == ["before_rl", *(f"step_{i}" for i in range(1, 6)), "after_rl"]
    last_end = {r["step"]: r["wall_s"] for r in metrics(run)}  # a redone step's row comes after the lost one's
    steps = evals[1:6]
    assert all(e["deferred"] for e in steps)
    assert [e["wall_s"] for e in steps] == [last_end[i] for i in range(1, 6)]
    assert [e["scored_at"] for e in steps] == sorted(e["scored_at"] for e in steps)
