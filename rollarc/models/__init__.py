"""Policies: tiny Llama-architecture causal LMs, a character tokenizer with a chat template, HF-format I/O."""

from rollarc.models.checkpoint import atomic_directory, load_policy, load_tokenizer, new_policy, save_policy
from rollarc.models.presets import PRESETS, build_model, count_parameters
from rollarc.models.tokenizer import build_tokenizer

__all__ = [
    "PRESETS",
    "atomic_directory",
    "build_model",
    "build_tokenizer",
    "count_parameters",
    "load_policy",
    "load_tokenizer",
    "new_policy",
    "save_policy",
]
