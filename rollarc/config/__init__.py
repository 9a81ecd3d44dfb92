"""The configuration layer: every config model, its YAML loader and the generated reference, one module each.

``from rollarc.config import Config`` keeps working: this package re-exports the names the single
``rollarc/config.py`` module exposed. It imports them on first use, not at import time, because the
package spans layers (docs/layering.md): ``rollarc.config.io`` and ``rollarc.config.cluster`` sit below
every other package, which imports them, while ``rollarc.config.run`` composes the sections of those
packages. An eager ``__init__`` would import ``run`` whenever a lower package imports ``config.io``,
a cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollarc.config.asynchrony import AsyncConfig as AsyncConfig
    from rollarc.config.cluster import ClusterConfig as ClusterConfig
    from rollarc.config.cluster import PoolConfig as PoolConfig
    from rollarc.config.cluster import RoleConfig as RoleConfig
    from rollarc.config.cluster import RolesConfig as RolesConfig
    from rollarc.config.elastic import ElasticChange as ElasticChange
    from rollarc.config.elastic import elastic_pool as elastic_pool
    from rollarc.config.elastic import elastic_problems as elastic_problems
    from rollarc.config.elastic import rollout_entry_replicas as rollout_entry_replicas
    from rollarc.config.elastic import rollout_replicas_at as rollout_replicas_at
    from rollarc.config.model import LoraConfig as LoraConfig
    from rollarc.config.model import ModelConfig as ModelConfig
    from rollarc.config.run import Config as Config
    from rollarc.config.run import RunConfig as RunConfig
    from rollarc.config.run import harvest_memory_problems as harvest_memory_problems
    from rollarc.config.run import load_train_config as load_train_config
    from rollarc.config.run import lora_problems as lora_problems
    from rollarc.config.tasks import DATASET_ENV as DATASET_ENV
    from rollarc.config.tasks import AgentConfig as AgentConfig
    from rollarc.config.tasks import SamplingConfig as SamplingConfig
    from rollarc.config.tasks import TaskConfig as TaskConfig
    from rollarc.config.train import DynamicSamplingConfig as DynamicSamplingConfig
    from rollarc.config.train import FSDPConfig as FSDPConfig
    from rollarc.config.train import SFTConfig as SFTConfig
    from rollarc.config.train import TrainConfig as TrainConfig

# Each public name and the submodule that defines it.
_HOME = {
    "AsyncConfig": "asynchrony",
    "ClusterConfig": "cluster",
    "PoolConfig": "cluster",
    "RoleConfig": "cluster",
    "RolesConfig": "cluster",
    "ElasticChange": "elastic",
    "elastic_pool": "elastic",
    "elastic_problems": "elastic",
    "rollout_entry_replicas": "elastic",
    "rollout_replicas_at": "elastic",
    "LoraConfig": "model",
    "ModelConfig": "model",
    "Config": "run",
    "RunConfig": "run",
    "harvest_memory_problems": "run",
    "load_train_config": "run",
    "lora_problems": "run",
    "DATASET_ENV": "tasks",
    "AgentConfig": "tasks",
    "SamplingConfig": "tasks",
    "TaskConfig": "tasks",
    "DynamicSamplingConfig": "train",
    "FSDPConfig": "train",
    "SFTConfig": "train",
    "TrainConfig": "train",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'rollarc.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rollarc.config.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value
