"""Plugin directories on the import path: of this process (``sys.path``) and of its children (``PYTHONPATH``).

Its own module, below ``rollarc.runtime``, because the SFT entry point needs it without starting Ray.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def plugin_pythonpath(paths: list[str]) -> str:
    """``PYTHONPATH`` with the plugin directories (absolute) in front; also put on this process's sys.path."""
    absolute = [str(Path(p).resolve()) for p in paths]
    for path in reversed(absolute):
        if path not in sys.path:
            sys.path.insert(0, path)
    current = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*absolute, *([current] if current else [])])
