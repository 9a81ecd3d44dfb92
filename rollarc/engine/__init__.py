"""rollarc's built-in inference engine: continuous batching over a slot KV cache, for CPU and small models.

The scheduler decides (:mod:`.scheduler`), the model runner executes (:mod:`.model_runner`), the
sampler picks tokens with their log-probs (:mod:`.sampling`); :class:`LLMEngine` is the synchronous
core and :class:`AsyncLLMEngine` runs it on a background thread for asyncio callers (Ray actors).

The names below are imported on first use (PEP 562): the router and the env workers import only
:mod:`.types`, and importing this package must not make every such Ray actor load torch and
transformers first (seconds of start-up on two cores, on every run's critical path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollarc.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports on first use
    from rollarc.engine.async_engine import AsyncLLMEngine as AsyncLLMEngine
    from rollarc.engine.async_engine import EngineDeadError as EngineDeadError
    from rollarc.engine.config import EngineConfig as EngineConfig
    from rollarc.engine.engine import LLMEngine as LLMEngine
    from rollarc.engine.model_runner import (
        SUPPORTED_MODEL_TYPES as SUPPORTED_MODEL_TYPES,
    )
    from rollarc.engine.model_runner import (
        UnsupportedModelError as UnsupportedModelError,
    )
    from rollarc.engine.types import (
        Completion as Completion,
    )
    from rollarc.engine.types import (
        FinishReason as FinishReason,
    )
    from rollarc.engine.types import (
        SamplingParams as SamplingParams,
    )

_WHERE = {
    "AsyncLLMEngine": "async_engine",
    "EngineDeadError": "types",
    "EngineConfig": "config",
    "LLMEngine": "engine",
    "SUPPORTED_MODEL_TYPES": "model_runner",
    "UnsupportedModelError": "model_runner",
    "Completion": "types",
    "FinishReason": "types",
    "SamplingParams": "types",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports(__name__, _WHERE, globals())
