"""The in-process reference loop (no Ray): deterministic batches per seed, a clear refusal without a policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollarc.config import Config
from rollarc.config.io import ConfigError, validate
from rollarc.train.reference_loop import run_reference


def tiny(policy: Path | None, **train: Any) -> Config:
    return validate(
        Config,
        {
            "seed": train.pop("seed", 0),
            "model": {"path": None if policy is None else str(policy)},
            "tasks": [
                {
                    "name": "scripted",
                    "env": {
                        "entry_point": "runtime_plugins:ScriptedEnv",
                        "kwargs": {"turns": 2, "reward_by_length": True},
                    },
                    "agent": {"max_turns": 3, "max_tokens_per_turn": 3, "context_limit": 200},
                }
            ],
            "engine": {"max_num_seqs": 8},
            "train": {"steps": 2, "groups_per_step": 2, "group_size": 2, "lr": 1e-3, "eval_episodes": 0, **train},
        },
    )


def test_same_seed_same_batches_and_a_new_seed_new_ones(nano_policy_dir):
    a, b = run_reference(tiny(nano_policy_dir)), run_reference(tiny(nano_policy_dir))
    digests = [s["batch_digest"] for s in a.steps]
    assert digests == [s["batch_digest"] for s in b.steps] and len(set(digests)) == 2
    assert [s["rewards"] for s in a.steps] == [s["rewards"] for s in b.steps]
    assert all(s["trajectories"] == 4 and s["token_staleness_max"] == 0.0 for s in a.steps)
    other = run_reference(tiny(nano_policy_dir, seed=1))
    assert [s["batch_digest"] for s in other.steps] != digests


def test_needs_a_starting_policy():
    with pytest.raises(ConfigError, match=r"model\.path"):
        run_reference(tiny(None))


def test_on_record_sees_every_step_and_evaluation_as_they_happen(nano_policy_dir):
    seen: list[dict[str, Any]] = []
    result = run_reference(tiny(nano_policy_dir, eval_episodes=2, eval_every=1), on_record=seen.append)
    evals = [r for r in seen if r.get("eval")]
    steps = [r for r in seen if not r.get("eval")]
    assert [e["version"] for e in evals] == [0, 1, 2] and all(e["episodes"] == 2 for e in evals)
    assert [s["version"] for s in steps] == [1, 2] and steps == result.steps
    assert [e["success"] for e in evals] == [e["success"] for e in result.evals]


def with_redundancy(cfg: Config, redundancy: int, keep: str = "by_index") -> Config:
    return cfg.model_copy(
        update={"async_": cfg.async_.model_copy(update={"redundancy": redundancy, "redundancy_keep": keep})}
    )


def test_spares_change_nothing_when_no_rollout_fails(nano_policy_dir):
    """by_index keeps rollouts 0..G-1 whenever they all end well: the spares played alongside are not trained."""
    plain = run_reference(tiny(nano_policy_dir))
    spared = run_reference(with_redundancy(tiny(nano_policy_dir), 2))
    assert [s["batch_digest"] for s in spared.steps] == [s["batch_digest"] for s in plain.steps]
    assert all(s["trajectories"] == 4 for s in spared.steps)


def test_refuses_first_finished_which_depends_on_timing(nano_policy_dir):
    with pytest.raises(ConfigError, match=r"redundancy_keep='first_finished'.*set async.redundancy_keep: by_index"):
        run_reference(with_redundancy(tiny(nano_policy_dir), 1, "first_finished"))
