"""FrozenLake as a text env: gymnasium's own ``FrozenLake-v1`` with a text observation and U/D/L/R.

Each reset draws a fresh map with gymnasium's ``generate_random_map(size, p, seed)`` (seeded from the
reset seed), so maps differ per seed and are solvable (the generator only returns maps with a path
from S to G; we also require the shortest path to fit in ``max_steps``). The dynamics, including the
slippery ones, are the real gymnasium env's.

Observation: the map, one line per row, with letters S (start), F (frozen), H (hole), G (goal) and P
where the player stands. Reward: 1 on reaching G, 0 otherwise; an invalid action gets
``invalid_penalty`` and does not move the player. Walking into the edge is a legal blocked move.
Falling into a hole terminates the episode without success.

Expert: the shortest path on the map from the player's cell (a BFS distance field from G; ties go to
the first move in U, D, L, R order). On a slippery lake this is the plan to aim for, not a guarantee.

``reset(options={"map": ["SFF", "FHF", "FFG"]})`` plays a given map.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from pydantic import Field

from rollarc.envs.base import GenerationFailed, Outcome, ParseMode, TextEnv, TextEnvConfig
from rollarc.envs.grid_moves import INVALID_MOVE_HINT, Move, parse_move

# gymnasium FrozenLake action ids
_ACTION_ID = {Move.L: 0, Move.D: 1, Move.R: 2, Move.U: 3}
PLAYER = "P"
MAX_MAP_ATTEMPTS = 100


class FrozenLakeConfig(TextEnvConfig):
    max_steps: int = Field(default=30, ge=1)
    size: int = Field(default=6, ge=2, le=16, description="the map is size x size")
    frozen_prob: float = Field(default=0.8, gt=0.0, le=1.0, description="chance a tile is frozen (not a hole)")
    is_slippery: bool = False
    success_rate: float = Field(
        default=1.0 / 3.0, ge=0.0, le=1.0, description="slippery: chance the move goes as asked"
    )


class FrozenLakeEnv(TextEnv[Move]):
    """gymnasium FrozenLake-v1 on a random map per seed, played in text."""

    Config = FrozenLakeConfig
    config: FrozenLakeConfig
    invalid_hint = INVALID_MOVE_HINT
    instructions = "FrozenLake. Walk from P to G without stepping on H. Reply U, D, L or R."

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.lake: gymnasium.Env | None = None
        self.map: list[str] = []
        self.position = 0
        self._distance: list[int | None] = []

    def _max_observation_length(self) -> int:
        size = self.config.size
        return len(INVALID_MOVE_HINT) + 1 + size * (size + 1)

    def _new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        if "map" in options:
            self.map = _checked_map(options["map"], self.config.size)
            self._distance = _distance_to_goal(self.map)
        else:
            self.map, self._distance = self._random_map(rng)
        if self.lake is not None:
            self.lake.close()
        cfg = self.config
        self.lake = gymnasium.make(
            "FrozenLake-v1",
            desc=self.map,
            is_slippery=cfg.is_slippery,
            success_rate=cfg.success_rate,
            max_episode_steps=cfg.max_steps,  # our turn counter truncates first (it also counts invalid turns)
        )
        self.position, _ = self.lake.reset(seed=int(rng.integers(2**31)))

    def _random_map(self, rng: np.random.Generator) -> tuple[list[str], list[int | None]]:
        cfg = self.config
        for _ in range(MAX_MAP_ATTEMPTS):
            lake_map = generate_random_map(size=cfg.size, p=cfg.frozen_prob, seed=int(rng.integers(2**31)))
            distance = _distance_to_goal(lake_map)
            start = distance[0]
            if start is not None and start <= cfg.max_steps:
                return lake_map, distance
        raise GenerationFailed(
            f"no {cfg.size}x{cfg.size} FrozenLake map with frozen_prob={cfg.frozen_prob} has a path of at most "
            f"max_steps={cfg.max_steps} moves after {MAX_MAP_ATTEMPTS} maps; raise max_steps or frozen_prob"
        )

    def _parse(self, action: str, mode: ParseMode) -> Move | None:
        return parse_move(action, mode)

    def _apply(self, move: Move) -> Outcome:
        assert self.lake is not None
        self.position, reward, terminated, _, _ = self.lake.step(_ACTION_ID[move])
        tile = self._tile(self.position)
        return Outcome(float(reward), terminated=bool(terminated), success=tile == "G")

    def _render(self) -> str:
        width = len(self.map)
        rows = [list(row) for row in self.map]
        if rows:
            row, col = divmod(self.position, width)
            rows[row][col] = PLAYER
        return "\n".join("".join(row) for row in rows)

    def _expert(self) -> str | None:
        here = self._distance[self.position]
        if here is None or here == 0:
            return None
        size = len(self.map)
        for move in Move:
            nxt = _step_cell(self.position, move, size)
            if self._distance[nxt] == here - 1:
                return move.name
        raise AssertionError("BFS distance field is inconsistent")  # unreachable: a BFS field always has a next step

    def _tile(self, cell: int) -> str:
        row, col = divmod(cell, len(self.map))
        return self.map[row][col]

    def close(self) -> None:
        if self.lake is not None:
            self.lake.close()
            self.lake = None


def _step_cell(cell: int, move: Move, size: int) -> int:
    """FrozenLake's move rule: the edge blocks."""
    row, col = divmod(cell, size)
    row = min(max(row + move.dr, 0), size - 1)
    col = min(max(col + move.dc, 0), size - 1)
    return row * size + col


def _distance_to_goal(lake_map: list[str]) -> list[int | None]:
    """Moves from each cell to G avoiding holes (None: G unreachable or the cell is a hole)."""
    size = len(lake_map)
    tiles = "".join(lake_map)
    distance: list[int | None] = [None] * (size * size)
    goal = tiles.index("G")
    distance[goal] = 0
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        here = distance[cell]
        assert here is not None  # only reached cells are queued
        row, col = divmod(cell, size)
        for move in Move:  # neighbours of `cell`; moves are symmetric, so a reverse step is a forward one
            r, c = row + move.dr, col + move.dc
            if 0 <= r < size and 0 <= c < size:
                prev = r * size + c
                if distance[prev] is None and tiles[prev] != "H":
                    distance[prev] = here + 1
                    queue.append(prev)
    return distance


def _checked_map(lake_map: Any, max_size: int) -> list[str]:
    if not isinstance(lake_map, list | tuple) or not all(isinstance(row, str) for row in lake_map):
        raise ValueError(f"FrozenLake options['map'] must be a list of strings, got {lake_map!r}")
    size = len(lake_map)
    if size > max_size:
        raise ValueError(f"FrozenLake options['map'] is {size}x{size}, larger than the env's size={max_size}")
    if size < 2 or any(len(row) != size for row in lake_map) or any(set(row) - set("SFHG") for row in lake_map):
        raise ValueError(f"FrozenLake options['map'] must be a square of S/F/H/G letters, got {lake_map!r}")
    tiles = "".join(lake_map)
    if tiles.count("S") != 1 or tiles.count("G") != 1:
        raise ValueError(f"FrozenLake options['map'] needs exactly one S and one G, got {lake_map!r}")
    return list(lake_map)
