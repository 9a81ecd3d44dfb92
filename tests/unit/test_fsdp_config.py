"""Config rules of FSDP training: several train replicas are allowed, settings without effect are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollarc.config import load_train_config
from rollarc.config.io import ConfigError

MINIMAL = {
    "tasks": [{"name": "fl", "env": {"id": "frozen_lake"}}],
    "cluster": {"pools": {"compute": {"count": 3}, "cpu": {"count": 4}}, "roles": {"train": {"pool": "compute"}}},
}


def load(tmp_path: Path, *overrides: str):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    return load_train_config(path, list(overrides))


def test_two_train_replicas_are_fsdp_ranks(tmp_path):
    cfg = load(tmp_path, "cluster.roles.train.replicas=2", "train.fsdp.reshard_after_forward=false")
    assert cfg.cluster.roles.train.replicas == 2 and cfg.train.fsdp.reshard_after_forward is False


def test_no_train_replica_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.replicas must be at least 1"):
        load(tmp_path, "cluster.roles.train.replicas=0")


def test_ranks_must_fit_the_train_pool(tmp_path):
    with pytest.raises(ConfigError, match=r"cluster\.pools\.compute: roles need 4 units but count is 3"):
        load(tmp_path, "cluster.roles.train.replicas=3")


def test_an_fsdp_setting_without_fsdp_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="reshard_after_forward has no effect with one train replica"):
        load(tmp_path, "train.fsdp.reshard_after_forward=false")
    cfg = load(tmp_path, "train.fsdp.reshard_after_forward=false", "train.fsdp.on_one_replica=true")
    assert cfg.train.fsdp.on_one_replica
