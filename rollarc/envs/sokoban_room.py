"""A Sokoban room: immutable state, the push rule, and its compact text form.

Cells are integer indices ``row * width + col`` over the room's *interior*; the ring of outer walls is
implied (never stored, never drawn) to keep observations short. Symbols::

    #  wall        _  floor      O  target
    X  box         *  box on target
    P  player      +  player on target

No library fits: gym-sokoban is unmaintained, renders images and generates rooms with its own RNG, so
the (small) mechanics live here, shared by the env, the solver and the generator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from rollarc.envs.grid_moves import Move

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "*", "P", "+"
SYMBOLS = (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET)


@dataclass(frozen=True)
class Room:
    """One Sokoban state. ``walls``/``targets``/``boxes`` are sets of cell indices."""

    height: int
    width: int
    walls: frozenset[int]
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int

    # ------------------------------------------------------------------ geometry
    def neighbour(self, cell: int, move: Move) -> int | None:
        """The cell one ``move`` away, or None when it is off the interior or a wall."""
        row, col = divmod(cell, self.width)
        row, col = row + move.dr, col + move.dc
        if not (0 <= row < self.height and 0 <= col < self.width):
            return None
        target = row * self.width + col
        return None if target in self.walls else target

    @cached_property
    def neighbours(self) -> tuple[tuple[int | None, ...], ...]:
        """``neighbours[cell][i]`` = neighbour of ``cell`` by ``list(Move)[i]`` (precomputed for the solver)."""
        return tuple(tuple(self.neighbour(cell, move) for move in Move) for cell in range(self.height * self.width))

    @property
    def floor(self) -> list[int]:
        return [cell for cell in range(self.height * self.width) if cell not in self.walls]

    @property
    def solved(self) -> bool:
        return self.boxes <= self.targets

    # ------------------------------------------------------------------ the push rule
    def move(self, move: Move) -> tuple[Room, int]:
        """Apply ``move``; returns (new room, change in boxes on targets).

        A move into a wall, or into a box that has a wall or a box behind it, is blocked: the room is
        returned unchanged.
        """
        ahead = self.neighbour(self.player, move)
        if ahead is None:
            return self, 0
        if ahead not in self.boxes:
            return replace(self, player=ahead), 0
        beyond = self.neighbour(ahead, move)
        if beyond is None or beyond in self.boxes:
            return self, 0
        boxes = (self.boxes - {ahead}) | {beyond}
        delta = (beyond in self.targets) - (ahead in self.targets)
        return replace(self, boxes=frozenset(boxes), player=ahead), delta

    # ------------------------------------------------------------------ text form
    def render(self) -> str:
        rows = []
        for row in range(self.height):
            rows.append("".join(self._symbol(row * self.width + col) for col in range(self.width)))
        return "\n".join(rows)

    def _symbol(self, cell: int) -> str:
        if cell in self.walls:
            return WALL
        on_target = cell in self.targets
        if cell == self.player:
            return PLAYER_ON_TARGET if on_target else PLAYER
        if cell in self.boxes:
            return BOX_ON_TARGET if on_target else BOX
        return TARGET if on_target else FLOOR

    @classmethod
    def parse(cls, text: str) -> Room:
        """Read a room drawn with :data:`SYMBOLS` (interior only, one line per row)."""
        lines = [line for line in text.strip("\n").split("\n")]
        width = len(lines[0]) if lines else 0
        if width == 0 or any(len(line) != width for line in lines):
            raise ValueError(f"sokoban layout must be a non-empty rectangle of equal-length lines, got {text!r}")
        walls, targets, boxes, players = set(), set(), set(), []
        for row, line in enumerate(lines):
            for col, symbol in enumerate(line):
                cell = row * width + col
                if symbol not in SYMBOLS:
                    raise ValueError(f"sokoban layout: unknown symbol {symbol!r} at row {row}, column {col}")
                if symbol == WALL:
                    walls.add(cell)
                if symbol in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                    targets.add(cell)
                if symbol in (BOX, BOX_ON_TARGET):
                    boxes.add(cell)
                if symbol in (PLAYER, PLAYER_ON_TARGET):
                    players.append(cell)
        if len(players) != 1:
            raise ValueError(f"sokoban layout needs exactly one player (P or +), found {len(players)}")
        if not boxes or len(boxes) != len(targets):
            raise ValueError(
                f"sokoban layout needs as many targets as boxes (>= 1): {len(boxes)} boxes, {len(targets)} targets"
            )
        return cls(len(lines), width, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])
