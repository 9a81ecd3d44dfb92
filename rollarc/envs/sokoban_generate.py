"""Procedural Sokoban rooms that are solvable by construction (reverse play), checked by the solver.

1. Draw interior walls with probability ``wall_density``; keep the room only if its floor is connected.
2. Put the boxes on distinct targets (a solved state) and the player on a free cell.
3. Play backwards: ``pulls_per_box * num_boxes`` times, the player walks to a random box and pulls it one cell;
   at the end it walks to a random reachable cell. Every pull is the reverse of a legal push and every
   walk is reversible, so the forward puzzle is solvable.
4. Run the optimal solver: it gives the demonstration plan and lets us reject rooms whose optimal
   plan is shorter than ``min_moves`` or longer than ``max_moves`` (the env's turn limit).

Everything draws from one ``numpy.random.Generator``, so a seed fixes the room.
"""

from __future__ import annotations

import numpy as np

from rollarc.envs.base import GenerationFailed
from rollarc.envs.grid_moves import Move
from rollarc.envs.sokoban_room import Room
from rollarc.envs.sokoban_solver import SolverBudgetExceeded, solve

MOVES = list(Move)


def generate_room(
    rng: np.random.Generator,
    *,
    height: int,
    width: int,
    num_boxes: int,
    wall_density: float,
    pulls_per_box: int,
    min_moves: int,
    max_moves: int,
    max_solver_states: int,
    max_attempts: int = 500,
) -> tuple[Room, list[Move]]:
    """A solvable room and its optimal plan (``min_moves <= len(plan) <= max_moves``)."""
    for _ in range(max_attempts):
        room = _solved_room(rng, height, width, num_boxes, wall_density)
        if room is None:
            continue
        room = _reverse_play(rng, room, pulls_per_box * num_boxes)
        try:
            plan = solve(room, max_solver_states)
        except SolverBudgetExceeded:
            continue
        if plan is not None and min_moves <= len(plan) <= max_moves:
            return room, plan
    raise GenerationFailed(
        f"no {height}x{width} sokoban room with {num_boxes} boxes, wall_density={wall_density} and an optimal "
        f"plan of {min_moves}..{max_moves} moves in {max_attempts} attempts; relax these settings"
    )


def _solved_room(rng: np.random.Generator, height: int, width: int, num_boxes: int, wall_density: float) -> Room | None:
    cells = height * width
    walls = frozenset(int(cell) for cell in np.flatnonzero(rng.random(cells) < wall_density))
    floor = [cell for cell in range(cells) if cell not in walls]
    if len(floor) < num_boxes + 2 or not _connected(height, width, walls, floor):
        return None
    chosen = rng.choice(len(floor), size=num_boxes + 1, replace=False)
    targets = frozenset(floor[int(i)] for i in chosen[:num_boxes])
    return Room(height, width, walls, targets, boxes=targets, player=floor[int(chosen[-1])])


def _connected(height: int, width: int, walls: frozenset[int], floor: list[int]) -> bool:
    probe = Room(height, width, walls, frozenset(), frozenset(), floor[0])
    seen, stack = {floor[0]}, [floor[0]]
    while stack:
        cell = stack.pop()
        for nxt in probe.neighbours[cell]:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return len(seen) == len(floor)


def _reverse_play(rng: np.random.Generator, room: Room, pulls: int) -> Room:
    """Pull random boxes backwards ``pulls`` times; the player walks between pulls (also reversible)."""
    player, boxes = room.player, set(room.boxes)
    for _ in range(pulls):
        reachable = _reachable(room, player, boxes)
        options = []
        for box in sorted(boxes):
            for move in MOVES:
                stand = room.neighbour(box, move)  # the player pulls from here, stepping one further
                if stand is None or stand not in reachable:
                    continue
                step_to = room.neighbour(stand, move)
                if step_to is not None and step_to not in boxes:
                    options.append((box, stand, step_to))
        if not options:
            break
        box, stand, step_to = options[int(rng.integers(len(options)))]
        boxes.remove(box)
        boxes.add(stand)
        player = step_to
    floor = sorted(_reachable(room, player, boxes))
    return Room(
        room.height, room.width, room.walls, room.targets, frozenset(boxes), floor[int(rng.integers(len(floor)))]
    )


def _reachable(room: Room, start: int, boxes: set[int]) -> set[int]:
    """Cells the player can walk to from ``start`` without moving a box."""
    seen, stack = {start}, [start]
    while stack:
        cell = stack.pop()
        for nxt in room.neighbours[cell]:
            if nxt is not None and nxt not in seen and nxt not in boxes:
                seen.add(nxt)
                stack.append(nxt)
    return seen
