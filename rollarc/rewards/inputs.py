"""What the judge reads of a trajectory: the last tokens the policy saw and said, as token ids.

The last segment of a trajectory ends with the final observation the policy answered and its final
reply, which is where an episode's outcome shows. The judge reads the last ``context_tokens`` ids of
it, so a request is a few hundred bytes whatever the trajectory's length, and the same function makes
the training data and the serving requests (no second copy of the format).
"""

from __future__ import annotations

from rollarc.agent.trajectory import Trajectory


def reward_tokens(traj: Trajectory, context_tokens: int) -> list[int]:
    """The last ``context_tokens`` token ids of the trajectory's last segment ([] when it has none)."""
    if context_tokens < 1:
        raise ValueError(f"context_tokens must be >= 1, got {context_tokens}")
    if not traj.segments:
        return []
    return list(traj.segments[-1].token_ids[-context_tokens:])
