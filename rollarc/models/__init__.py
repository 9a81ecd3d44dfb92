"""Policies: tiny Llama-architecture causal LMs, a character tokenizer with a chat template, HF-format I/O.

The names below are imported on first use (PEP 562): a config module that needs only the preset table, or a
Ray actor that needs only a tokenizer, must not load every submodule's torch and transformers imports first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollarc.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports on first use
    from rollarc.models.checkpoint import (
        atomic_directory as atomic_directory,
    )
    from rollarc.models.checkpoint import (
        load_policy as load_policy,
    )
    from rollarc.models.checkpoint import (
        load_tokenizer as load_tokenizer,
    )
    from rollarc.models.checkpoint import (
        new_policy as new_policy,
    )
    from rollarc.models.checkpoint import (
        save_policy as save_policy,
    )
    from rollarc.models.presets import build_model as build_model
    from rollarc.models.presets import count_parameters as count_parameters
    from rollarc.models.sizes import PRESETS as PRESETS
    from rollarc.models.tokenizer import build_tokenizer as build_tokenizer

_WHERE = {
    "PRESETS": "sizes",
    "atomic_directory": "checkpoint",
    "build_model": "presets",
    "build_tokenizer": "tokenizer",
    "count_parameters": "presets",
    "load_policy": "checkpoint",
    "load_tokenizer": "checkpoint",
    "new_policy": "checkpoint",
    "save_policy": "checkpoint",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports(__name__, _WHERE, globals())
