"""Optimal Sokoban solver: breadth-first search over (player cell, box cells).

BFS over single player moves gives a plan with the fewest moves, which is what the env's per-step
penalty rewards. Two prunings keep it exact and fast: a box is never pushed onto a *dead* cell (a cell
from which no push sequence can bring a box to any target, computed once by pulling from targets), and
states are deduplicated. The search is bounded by ``max_states`` so a large room fails loudly instead
of hanging a worker. (A* would expand fewer states on large rooms; at the 5x5-7x7 sizes the tiny
policies play, BFS is a few milliseconds and obviously optimal.)
"""

from __future__ import annotations

from collections import deque

from rollarc.envs.grid_moves import Move
from rollarc.envs.sokoban_room import Room

MOVES = list(Move)


class SolverBudgetExceeded(RuntimeError):
    """The search visited more states than allowed; the room is too large for BFS."""


def live_cells(room: Room) -> frozenset[int]:
    """Cells from which a lone box can still be pushed onto some target (all others are dead)."""
    live = set(room.targets)
    frontier = list(room.targets)
    while frontier:
        cell = frontier.pop()
        for move in MOVES:
            # The box reached `cell` by a push in direction `move`: it came from `source`, with the
            # player standing one further back.
            back = move.opposite
            source = room.neighbour(cell, back)
            if source is None or source in live:
                continue
            if room.neighbour(source, back) is not None:
                live.add(source)
                frontier.append(source)
    return frozenset(live)


def solve(room: Room, max_states: int = 1_000_000) -> list[Move] | None:
    """The shortest move sequence that puts every box on a target, [] if solved, None if impossible."""
    if room.solved:
        return []
    neighbours = room.neighbours
    live = live_cells(room)
    if not room.boxes <= live:
        return None
    targets = room.targets
    start = (room.player, tuple(sorted(room.boxes)))
    parents: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, tuple[int, ...]], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        for index in range(4):
            ahead = neighbours[player][index]
            if ahead is None:
                continue
            if ahead in boxes:
                beyond = neighbours[ahead][index]
                if beyond is None or beyond in boxes or beyond not in live:
                    continue
                new_boxes = tuple(sorted(beyond if box == ahead else box for box in boxes))
            else:
                new_boxes = boxes
            new_state = (ahead, new_boxes)
            if new_state in parents:
                continue
            parents[new_state] = (state, index)
            if new_boxes is not boxes and all(box in targets for box in new_boxes):
                return _backtrack(parents, new_state)
            if len(parents) > max_states:
                raise SolverBudgetExceeded(
                    f"sokoban solver visited more than {max_states} states on a {room.height}x{room.width} room "
                    f"with {len(room.boxes)} boxes; use a smaller room or fewer boxes"
                )
            queue.append(new_state)
    return None


def _backtrack(parents: dict, state: tuple[int, tuple[int, ...]]) -> list[Move]:
    plan = []
    link = parents[state]
    while link is not None:
        state, index = link
        plan.append(MOVES[index])
        link = parents[state]
    plan.reverse()
    return plan


def plan_text(plan: list[Move]) -> str:
    """A plan as the action letters, e.g. ``"RRUL"`` (for logs and tests)."""
    return "".join(move.name for move in plan)
