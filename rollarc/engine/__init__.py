"""rollarc's built-in inference engine: continuous batching over a slot KV cache, for CPU and small models.

The scheduler decides (:mod:`.scheduler`), the model runner executes (:mod:`.model_runner`), the
sampler picks tokens with their log-probs (:mod:`.sampling`); :class:`LLMEngine` is the synchronous
core and :class:`AsyncLLMEngine` runs it on a background thread for asyncio callers (Ray actors).

The names below are imported on first use, not with the package: a process that needs only the engine's
types or errors (the router, EnvWorkers) then does not import torch, which costs seconds per actor start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollarc.engine.async_engine import AsyncLLMEngine as AsyncLLMEngine
    from rollarc.engine.config import EngineConfig as EngineConfig
    from rollarc.engine.engine import LLMEngine as LLMEngine
    from rollarc.engine.errors import EngineDeadError as EngineDeadError
    from rollarc.engine.model_runner import SUPPORTED_MODEL_TYPES as SUPPORTED_MODEL_TYPES
    from rollarc.engine.model_runner import UnsupportedModelError as UnsupportedModelError
    from rollarc.engine.types import Completion as Completion
    from rollarc.engine.types import FinishReason as FinishReason
    from rollarc.engine.types import SamplingParams as SamplingParams

# Each public name and the submodule that defines it.
_HOME = {
    "AsyncLLMEngine": "async_engine",
    "EngineConfig": "config",
    "LLMEngine": "engine",
    "EngineDeadError": "errors",
    "SUPPORTED_MODEL_TYPES": "model_runner",
    "UnsupportedModelError": "model_runner",
    "Completion": "types",
    "FinishReason": "types",
    "SamplingParams": "types",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'rollarc.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rollarc.engine.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value
