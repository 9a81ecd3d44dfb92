"""A package's public names, imported from their submodules on first use (PEP 562 module ``__getattr__``).

Why: importing a submodule runs its package's ``__init__`` first. Packages whose ``__init__`` imported every
submodule made every process that needs one light module (the router's request types, a config class) import
torch and transformers too: 4-5 s of CPU on two cores. ``rollarc.config`` does the same for another reason (its
docstring: an import cycle across layers).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` (``namespace``: its ``globals()``): name ``n`` is
    ``getattr(<package>.<where[n]>, n)``, kept in ``namespace`` so later look-ups skip the function.

    No submodule may be named like one of the names: importing it would make the package attribute the module."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value
        return value

    return __getattr__
