"""Sokoban as a text env: push every box (X) onto a target (O) with moves U/D/L/R.

Observation: the room's interior, one short line per row (see :mod:`rollarc.envs.sokoban_room` for the
symbols; the outer wall ring is implied). Rewards (all configurable):

* ``step_penalty`` (-0.01) on every valid move, including a blocked one;
* ``box_on_target_reward`` (+1) when a push puts a box on a target, ``box_off_target_penalty`` (-1)
  when a push takes one off;
* ``solved_reward`` (+10) when the last box reaches a target; the episode then terminates.

A move into a wall, or into a box that cannot move, is a *legal blocked move*: the turn is used and
the step penalty applies, but it is not an invalid action. Only text that names no move is invalid
(``invalid_penalty``, state unchanged). Deadlocks are not detected: the episode runs to ``max_steps``.

``reset(options={"layout": text})`` plays a given room instead of a generated one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, model_validator

from rollarc.envs.base import Outcome, ParseMode, TextEnv, TextEnvConfig
from rollarc.envs.grid_moves import INVALID_MOVE_HINT, Move, parse_move
from rollarc.envs.sokoban_generate import generate_room
from rollarc.envs.sokoban_room import Room
from rollarc.envs.sokoban_solver import solve


class SokobanConfig(TextEnvConfig):
    max_steps: int = Field(default=30, ge=1)
    height: int = Field(default=5, ge=2, le=12, description="interior rows")
    width: int = Field(default=5, ge=2, le=12, description="interior columns")
    num_boxes: int = Field(default=1, ge=1, le=4)
    wall_density: float = Field(default=0.1, ge=0.0, le=0.5, description="chance an interior cell is a wall")
    pulls_per_box: int = Field(default=4, ge=1, description="reverse-play pulls per box when generating")
    min_solution_moves: int = Field(default=2, ge=1, description="reject rooms solvable in fewer moves")
    max_solver_states: int = Field(default=500_000, ge=1000)
    step_penalty: float = -0.01
    box_on_target_reward: float = 1.0
    box_off_target_penalty: float = -1.0
    solved_reward: float = 10.0

    @model_validator(mode="after")
    def _fits(self) -> SokobanConfig:
        if self.num_boxes + 1 >= self.height * self.width:
            raise ValueError(f"num_boxes={self.num_boxes} does not fit a {self.height}x{self.width} room")
        if self.min_solution_moves > self.max_steps:
            raise ValueError(f"min_solution_moves={self.min_solution_moves} exceeds max_steps={self.max_steps}")
        return self


class SokobanEnv(TextEnv[Move]):
    """Procedurally generated Sokoban; every generated room is solvable within ``max_steps``."""

    Config = SokobanConfig
    config: SokobanConfig
    invalid_hint = INVALID_MOVE_HINT
    instructions = "Sokoban. Push every X onto an O. P is you, # wall, _ floor, * box on O. Reply U, D, L or R."

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.room: Room | None = None
        self._expert_moves: dict[Room, Move] = {}

    def _max_observation_length(self) -> int:
        grid = self.config.height * (self.config.width + 1)
        return len(INVALID_MOVE_HINT) + 1 + grid

    def _new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self._expert_moves = {}
        if "layout" in options:
            self.room = Room.parse(options["layout"])
            if self.room.height > self.config.height or self.room.width > self.config.width:
                raise ValueError(
                    f"sokoban options['layout'] is {self.room.height}x{self.room.width}, larger than the env's "
                    f"height x width = {self.config.height}x{self.config.width}"
                )
            return
        cfg = self.config
        self.room, plan = generate_room(
            rng,
            height=cfg.height,
            width=cfg.width,
            num_boxes=cfg.num_boxes,
            wall_density=cfg.wall_density,
            pulls_per_box=cfg.pulls_per_box,
            min_moves=cfg.min_solution_moves,
            max_moves=cfg.max_steps,
            max_solver_states=cfg.max_solver_states,
        )
        self._remember(self.room, plan)

    def _parse(self, action: str, mode: ParseMode) -> Move | None:
        return parse_move(action, mode)

    def _apply(self, move: Move) -> Outcome:
        assert self.room is not None
        cfg = self.config
        self.room, on_target_delta = self.room.move(move)
        reward = cfg.step_penalty
        if on_target_delta > 0:
            reward += cfg.box_on_target_reward * on_target_delta
        elif on_target_delta < 0:
            reward += cfg.box_off_target_penalty * -on_target_delta
        if self.room.solved:
            return Outcome(reward + cfg.solved_reward, terminated=True, success=True)
        return Outcome(reward)

    def _render(self) -> str:
        return self.room.render() if self.room is not None else ""

    def _expert(self) -> str | None:
        assert self.room is not None
        if self.room not in self._expert_moves:
            plan = solve(self.room, self.config.max_solver_states)
            if not plan:
                return None
            self._remember(self.room, plan)
        return self._expert_moves[self.room].name

    def _remember(self, room: Room, plan: list[Move]) -> None:
        """Cache the next optimal move of every state along an optimal plan (each suffix is optimal too)."""
        for move in plan:
            self._expert_moves[room] = move
            room, _ = room.move(move)
