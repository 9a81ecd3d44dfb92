"""The two ways a training run's loop stops its normal course, and the one-line form of a remote error.

Their own module so that the controller's helpers (held-out evaluation, the step loop) raise the same types.
"""

from __future__ import annotations

from ray.exceptions import RayTaskError


class RunError(RuntimeError):
    """The run cannot continue; the message says why and where the last good checkpoint is."""


class TrainerLost(RuntimeError):
    """The TrainWorker died (a lost node, a crash, ``ray.kill``); the controller resumes from the last checkpoint."""


def remote_cause(err: RayTaskError) -> str:
    """A remote error in one line: its cause's type and message, not Ray's multi-line traceback."""
    cause = getattr(err, "cause", None)
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(err).splitlines()[0]
