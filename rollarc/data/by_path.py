"""Import a plugin function named ``package.module:function`` (tools, tool-call parsers), with one-line errors."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_function(path: str, label: str, error: type[Exception]) -> Callable[..., Any]:
    """The function at ``path``; ``error`` (one line, starting with ``label``) when it does not import."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise error(f"{label}: importing it failed: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise error(f"{label}: module {module_name!r} has no function {attr!r}")
    return fn
