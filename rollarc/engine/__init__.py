"""rollarc's built-in inference engine: continuous batching over a slot KV cache, for CPU and small models.

The scheduler decides (:mod:`.scheduler`), the model runner executes (:mod:`.model_runner`), the
sampler picks tokens with their log-probs (:mod:`.sampling`); :class:`LLMEngine` is the synchronous
core and :class:`AsyncLLMEngine` runs it on a background thread for asyncio callers (Ray actors).
"""

from rollarc.engine.async_engine import AsyncLLMEngine, EngineDeadError
from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.model_runner import SUPPORTED_MODEL_TYPES, UnsupportedModelError
from rollarc.engine.types import Completion, FinishReason, SamplingParams

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AsyncLLMEngine",
    "Completion",
    "EngineConfig",
    "EngineDeadError",
    "FinishReason",
    "LLMEngine",
    "SamplingParams",
    "UnsupportedModelError",
]
