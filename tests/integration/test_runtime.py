"""The Ray runtime end to end on a local cluster: training, reports, reproducibility, resume, failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollarc.config import Config
from rollarc.config.io import ConfigError, validate
from rollarc.runtime.entry import run_training
from rollarc.runtime.run_dir import layout_problems
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def config(policy: Path, runs: Path, **sections: Any) -> Config:
    """The suite's base LLM run: two short steps of a scripted env, joining the suite's shared Ray cluster
    (``tests/integration/shared_ray.py``; ``cluster={"address": None}`` starts a cluster of the run's own)."""
    env_kwargs = sections.pop("env_kwargs", {})
    data: dict[str, Any] = {
        "name": "it",
        "model": {"path": str(policy)},
        "tasks": [
            {
                "name": "scripted",
                "env": {
                    "entry_point": "runtime_plugins:ScriptedEnv",
                    "kwargs": {"turns": 2, "reward_by_length": True, **env_kwargs},
                },
                "agent": {"max_turns": 4, "max_tokens_per_turn": 3, "history": "full", "context_limit": 200},
            }
        ],
        "engine": {"max_num_seqs": 16, "prefix_cache_tokens": 4096},
        "train": {
            "steps": 2,
            "groups_per_step": 2,
            "group_size": 2,
            "lr": 1e-3,
            "eval_every": 0,
            "eval_episodes": 4,
            "checkpoint_every": 1,
        },
        "cluster": {
            "address": shared_ray.address(),
            "num_cpus": 2,
            "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        },
        "run": {"dir": str(runs), "progress": False},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return validate(Config, data)


def only_run(runs: Path) -> Path:
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return run


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# Per-step metrics that measure time or memory; everything else in a step's record must match exactly.
TIMING_KEYS = {"wall_s", "step_time_s", "train_s", "sync_s", "train_sync_s", "gen_tok_s", "trajectories_per_s"}


def deterministic(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS and not k.startswith("rss_mb")} for r in rows]


def test_a_run_end_to_end_is_reproducible_and_a_resumed_run_equals_the_uninterrupted_one(nano_policy_dir, tmp_path):
    """Three runs of one config, each check on the run it needs (three Ray runs where five were):

    - ``full``, 3 steps at once, checked end to end: metrics, summary, report, timeline, checkpoints;
    - ``part``, the same config stopped after 2 steps: the same seed gives the same trajectories and bitwise the same
      weights as ``full`` after step 2;
    - ``part`` resumed to 3 steps: the same metrics, counters and bitwise the same weights as ``full``.

    ``max_num_seqs: 1`` makes every rollout forward pass a batch of one, so the engine's log-probs do not depend on
    which sequences happen to share a batch (the one source of float differences between two runs: with batches the
    weights agree only to float rounding, 1.9e-5 seen in CI). ``kl_coef > 0`` makes the KL reference matter: a
    resumed run whose reference were the resumed weights would train to other weights.
    """
    exact = {"engine": {"max_num_seqs": 1}, "algo": {"kl_coef": 0.5}}
    assert run_training(config(nano_policy_dir, tmp_path / "full", train={"steps": 3}, **exact)) == 0
    full = only_run(tmp_path / "full")

    # end to end, on the uninterrupted run
    rows = metrics(full)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["staleness_max"] == 0 and r["trajectories"] == 4 for r in rows)
    summary = json.loads((full / "summary.json").read_text())
    assert summary["heldout_episodes"] == 4 and summary["steps"] == 3
    assert 0.0 <= summary["heldout_success_after_rl"] <= 1.0
    assert set(summary["bubble_fraction"]) >= {"env", "rollout", "train"}
    # start-up, measured: joining Ray, then every actor started and registered, within the run's wall time
    assert summary["ray_start_s"] > 0 and 0 < summary["startup_s"] < summary["total_wall_s"]
    for name in ["config.yaml", "timeline.jsonl", "learning_curve.png", "timeline.png"]:
        assert (full / name).stat().st_size > 0, name
    assert any((full / "tensorboard").iterdir())
    report = (full / "report.md").read_text()  # the training run builds report.md at the end
    assert f"{summary['heldout_success_after_rl']:.4g} after RL" in report
    assert layout_problems(full) == []  # the layout a t2i run has too (test_t2i_train)
    assert "![per-role timeline](timeline.png)" in report and "```yaml\nname: " in report
    spans = [json.loads(line) for line in (full / "timeline.jsonl").read_text().splitlines()]
    assert {s["kind"] for s in spans} >= {"generate", "env_step", "train", "sync"}
    final = AutoModelForCausalLM.from_pretrained(full / "checkpoints" / "step_000003" / "policy")
    first = AutoModelForCausalLM.from_pretrained(full / "checkpoints" / "step_000001" / "policy")
    assert not torch.equal(final.model.embed_tokens.weight, first.model.embed_tokens.weight)

    # the same seed: the same trajectories, and bitwise the same weights
    assert run_training(config(nano_policy_dir, tmp_path / "part", **exact)) == 0  # train.steps: 2
    run = only_run(tmp_path / "part")
    keys = ["batch_digest", "reward", "generated_tokens", "prompt_tokens", "turns"]
    assert [[r[k] for k in keys] for r in metrics(run)] == [[r[k] for k in keys] for r in metrics(full)[:2]]
    for step in ("step_000001", "step_000002"):
        a = AutoModelForCausalLM.from_pretrained(full / "checkpoints" / step / "policy").state_dict()
        b = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / step / "policy").state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), step

    # resumed to 3 steps: the uninterrupted run's metrics, counters and weights
    clock_at_checkpoint = json.loads((run / "checkpoints" / "step_000002" / "state.json").read_text())["wall_s"]
    resumed = config(nano_policy_dir, tmp_path / "part", resume=str(run), train={"steps": 3}, **exact)
    assert run_training(resumed) == 0

    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    assert deterministic(metrics(run)) == deterministic(metrics(full))
    a = AutoModelForCausalLM.from_pretrained(full / "checkpoints" / "step_000003" / "policy").state_dict()
    b = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step_000003" / "policy").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    summary_full, summary_run = (json.loads((r / "summary.json").read_text()) for r in (full, run))
    for key in ("groups_started", "groups_trained", "trajectories_trained", "failed_trajectories", "steps"):
        assert summary_run[key] == summary_full[key], key
    assert summary_run["resumes"] == 1
    profiles_full, profiles_run = (json.loads((r / "task_profiles.json").read_text()) for r in (full, run))
    for field in ("turns", "new_tokens_per_turn", "prompt_tokens_per_turn"):
        assert profiles_run["tasks"]["scripted"][field] == profiles_full["tasks"]["scripted"][field], field

    # The run clock continues: the third step's train span starts after the checkpoint, not near zero.
    train = [
        s
        for s in (json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines())
        if s["kind"] == "train"
    ]
    assert [s["step"] for s in train] == [0, 1, 2]
    assert train[2]["t0"] >= clock_at_checkpoint > train[1]["t1"]
    assert summary_run["rl_window"][0] <= train[0]["t0"]  # the RL window started in the first process

    # The run's config.yaml is the one it started with; the resume's change is recorded beside it.
    assert "steps: 2" in (run / "config.yaml").read_text()
    (history,) = [json.loads(line) for line in (run / "config_history.jsonl").read_text().splitlines()]
    assert history["changed"] == {"train.steps": {"from": 2, "to": 3}} and history["checkpoint"] == "step_000002"
    assert "steps: 3" in (run / "config.resume-1.yaml").read_text()

    # Resuming it with another config is refused before anything starts, naming the keys; nothing is written.
    other = config(nano_policy_dir, tmp_path / "part", resume=str(run), train={"steps": 4, "lr": 0.5}, seed=3, **exact)
    with pytest.raises(ConfigError, match=r"differs from the run's in seed \(0 -> 3\), train\.lr \(0\.001 -> 0\.5\);"):
        run_training(other)
    assert len((run / "config_history.jsonl").read_text().splitlines()) == 1
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]


def test_env_failures_fail_only_their_trajectories(nano_policy_dir, tmp_path):
    cfg = config(nano_policy_dir, tmp_path, env_kwargs={"raise_on_seed_mod": 3}, train={"eval_episodes": 6})
    assert run_training(cfg) == 0
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    # Groups of env seeds 0 and 3 fail whole (every trajectory of a group shares the seed) and are replaced.
    assert summary["failed_trajectories"] >= 4 and summary["dropped_failed_groups"] >= 2
    assert summary["failure_reasons"].get("env_step_error:RuntimeError", 0) >= 4
    assert any("scripted env crash on seed" in m for m in summary["failure_examples"]["env_step_error:RuntimeError"])
    assert summary["steps"] == 2


def test_nan_reward_stops_the_run_with_a_clear_message(nano_policy_dir, tmp_path, capsys):
    cfg = config(nano_policy_dir, tmp_path, env_kwargs={"nan_reward": True})
    assert run_training(cfg) == 1
    assert "non-finite reward" in capsys.readouterr().err
