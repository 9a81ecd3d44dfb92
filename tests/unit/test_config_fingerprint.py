"""The config fingerprint and the resume check, on hand-built configs."""

from __future__ import annotations

import pytest

from rollarc.config.io import ConfigError
from rollarc.report.config_fingerprint import (
    SAFE_TO_CHANGE,
    check_resume,
    config_diff,
    fingerprint,
    flatten,
    is_safe_to_change,
)


def base() -> dict:
    return {
        "name": "it",
        "seed": 0,
        "tasks": [{"name": "a", "weight": 1.0}],
        "train": {"steps": 2, "lr": 0.001, "eval_every": 0},
        "cluster": {"roles": {"rollout": [{"pool": "gpu", "threads": 1}], "train": {"pool": "gpu", "threads": 1}}},
        "run": {"progress": True},
        "resume": None,
    }


def test_fingerprint_ignores_key_order_and_resume_but_not_values():
    a = base()
    b = dict(reversed(list(base().items())), resume="runs/it-1")
    assert fingerprint(a) == fingerprint(b)
    assert len(fingerprint(a)) == 64
    c = base()
    c["train"] = {**c["train"], "lr": 0.002}
    assert fingerprint(c) != fingerprint(a)


def test_flatten_names_list_items_by_index():
    assert flatten({"a": {"b": [1, {"c": 2}]}, "d": {}, "e": []}) == {"a.b.0": 1, "a.b.1.c": 2, "d": {}, "e": []}


def test_diff_lists_every_differing_dotted_key():
    new = base()
    new["tasks"] = [{"name": "b", "weight": 1.0}, {"name": "c", "weight": 2.0}]
    new["train"] = {**new["train"], "steps": 5}
    assert config_diff(base(), new) == {
        "tasks.0.name": ("a", "b"),
        "tasks.1.name": ("<absent>", "c"),
        "tasks.1.weight": ("<absent>", 2.0),
        "train.steps": (2, 5),
    }


def test_safe_changes_pass_and_are_returned():
    new = base()
    new["train"] = {**new["train"], "steps": 4, "eval_every": 2}
    new["run"] = {"progress": False}
    new["cluster"]["roles"]["rollout"][0]["threads"] = 2
    new["resume"] = "runs/it-1"
    changes = check_resume(base(), new, "runs/it-1")
    assert set(changes) == {
        "train.steps",
        "train.eval_every",
        "run.progress",
        "cluster.roles.rollout.0.threads",
        "resume",
    }


def test_unsafe_changes_are_refused_in_one_line_naming_the_keys():
    new = base()
    new["tasks"] = [{"name": "b", "weight": 1.0}]
    new["train"] = {**new["train"], "steps": 4, "lr": 0.01}
    with pytest.raises(ConfigError) as err:
        check_resume(base(), new, "runs/it-1")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        'resume=runs/it-1: the config differs from the run\'s in tasks.0.name ("a" -> "b"), train.lr'
    )
    assert "train.steps (" not in message  # a safe change is not listed as a reason


def test_the_allowlist_is_explicit_and_does_not_reach_the_maths():
    assert is_safe_to_change("cluster.roles.rollout.3.threads") and is_safe_to_change("train.steps")
    for key in ("train.lr", "seed", "algo.kl_coef", "tasks.0.env.kwargs.size", "cluster.roles.rollout.0.replicas"):
        assert not is_safe_to_change(key), key
    assert is_safe_to_change("cluster.pools.gpu.count") and not is_safe_to_change("cluster.pools.gpu.kind")
    assert all("*" not in p or p.endswith((".threads", ".count")) for p in SAFE_TO_CHANGE)
