"""The engine's errors, apart from the engine: the router and the controller catch them without importing
torch (an actor that imports this module alone starts seconds sooner)."""

from __future__ import annotations


class EngineDeadError(RuntimeError):
    """The engine's loop thread is not running (shut down, or it failed: see ``__cause__``)."""
