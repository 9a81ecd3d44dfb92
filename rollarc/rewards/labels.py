"""Solver-labelled progress: how much of the way to the goal an episode got, measured by the env's expert.

``progress = 1`` on success; otherwise ``1 - d_final / d_start`` clipped to [0, 1], where ``d`` is the
number of expert moves from a state to success. A state from which the expert cannot succeed (a
hole, a box in a corner, a broken env copy) has no distance and scores 0. This works for any env with
``expert_action`` and needs no env-specific code: the expert plays on a deep copy of the env.
"""

from __future__ import annotations

import copy

import gymnasium

from rollarc.envs.registry import expert_action


def expert_distance(env: gymnasium.Env, horizon: int) -> int | None:
    """Expert moves from ``env``'s current state to success, on a copy (None: not within ``horizon``)."""
    probe = copy.deepcopy(env)
    for moves in range(1, horizon + 1):
        action = expert_action(probe)
        if action is None:
            return None
        _, _, terminated, truncated, info = probe.step(action)
        if terminated or truncated:
            return moves if info.get("success", False) else None
    return None


def progress_label(success: bool, d_start: int | None, d_final: int | None) -> float:
    """The progress target in [0, 1] (see the module docstring)."""
    if success:
        return 1.0
    if d_start is None or d_final is None or d_start <= 0:
        return 0.0
    return min(max(1.0 - d_final / d_start, 0.0), 1.0)
