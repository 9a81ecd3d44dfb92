"""Grid moves U/D/L/R and their parsing from reply text, shared by the grid envs (Sokoban, FrozenLake).

Strict mode accepts exactly one of ``U D L R``. Lenient mode also accepts ``up/down/left/right`` in any
case, with surrounding whitespace or punctuation (``" r."``, ``"Left!"``, ``"(U)"``).
"""

from __future__ import annotations

import string
from enum import Enum

from rollarc.envs.base import ParseMode


class Move(Enum):
    """A move on a grid; the value is (row delta, column delta)."""

    U = (-1, 0)
    D = (1, 0)
    L = (0, -1)
    R = (0, 1)

    @property
    def dr(self) -> int:
        return self.value[0]

    @property
    def dc(self) -> int:
        return self.value[1]

    @property
    def opposite(self) -> Move:
        return Move((-self.dr, -self.dc))


INVALID_MOVE_HINT = "Invalid action. Use U, D, L or R."

_LENIENT_WORDS = {
    "u": Move.U,
    "up": Move.U,
    "d": Move.D,
    "down": Move.D,
    "l": Move.L,
    "left": Move.L,
    "r": Move.R,
    "right": Move.R,
}
_STRIP = string.whitespace + string.punctuation


def parse_move(text: str, mode: ParseMode) -> Move | None:
    """The move named by ``text``, or None when it names none in ``mode``."""
    if mode == "strict":
        return Move[text] if text in ("U", "D", "L", "R") else None
    return _LENIENT_WORDS.get(text.strip(_STRIP).lower())
