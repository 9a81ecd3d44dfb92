"""rollarc.config is a package whose ``__init__`` re-exports the training config's names on first use.

It must keep ``from rollarc.config import Config`` working, and it must not import the training config when a
lower package imports ``rollarc.config.io``: that would be an import cycle (docs/layering.md).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rollarc.config

# The public names the single module rollarc/config.py had, before it became a package.
PUBLIC = {
    "AgentConfig",
    "AsyncConfig",
    "ClusterConfig",
    "Config",
    "DATASET_ENV",
    "DynamicSamplingConfig",
    "ElasticChange",
    "FSDPConfig",
    "LoraConfig",
    "ModelConfig",
    "PoolConfig",
    "RoleConfig",
    "RolesConfig",
    "RunConfig",
    "SFTConfig",
    "SamplingConfig",
    "TaskConfig",
    "TrainConfig",
    "elastic_pool",
    "elastic_problems",
    "harvest_memory_problems",
    "load_train_config",
    "lora_problems",
    "rollout_entry_replicas",
    "rollout_replicas_at",
}


def test_the_package_reexports_every_public_name_from_the_module_that_defines_it():
    assert set(rollarc.config.__all__) == PUBLIC
    for name in PUBLIC:
        value = getattr(rollarc.config, name)
        home = importlib.import_module(f"rollarc.config.{rollarc.config._HOME[name]}")
        assert value is getattr(home, name), name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rollarc.config.Nope  # noqa: B018


def _fresh_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_importing_the_config_base_does_not_import_the_training_config():
    code = "import sys, rollarc.config.io, rollarc.config.cluster; print('rollarc.config.run' in sys.modules)"
    assert _fresh_python(code) == "False"


def test_a_lower_package_imported_first_does_not_make_a_cycle():
    """rewards/config.py imports rollarc.config.cluster, and rollarc.config.run imports rewards/config.py."""
    code = "import rollarc.rewards.config; from rollarc.config import Config; print(Config.__module__)"
    assert _fresh_python(code) == "rollarc.config.run"
