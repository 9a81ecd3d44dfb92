"""Where a lost t2i trainer restarts from: the checkpoint of the step it was training from.

The controller keeps the step's samples and rewards, so a replacement trainer loaded from the checkpoint of
the step it starts from trains that step again on them: no step and no sample is lost. That checkpoint exists
when ``run.checkpoint_every`` is 1 (what ``rollarc bench chaos --path spot`` sets), or at the run's start (the
policy it started from); otherwise the run stops with one line saying so, and ``--resume`` takes it from its
last checkpoint. Pure: a unit test calls it.
"""

from __future__ import annotations

from pathlib import Path

from rollarc.report.run_dir import CHECKPOINTS, checkpoint_name


class TrainerLost(RuntimeError):
    """The t2i trainer was lost where no checkpoint lets it restart without redoing steps."""


def restart_point(run_dir: Path, step: int, start_step: int) -> Path | None:
    """The checkpoint a replacement trainer loads to train step ``step + 1``: ``checkpoints/step_<step>``,
    or None at the run's start (the run's own starting policy); raises :class:`TrainerLost` when neither."""
    checkpoint = run_dir / CHECKPOINTS / checkpoint_name(step)
    if (checkpoint / "state.json").is_file():
        return checkpoint
    if step == start_step:
        return None
    raise TrainerLost(
        f"the t2i trainer was lost training step {step + 1} and step {step} has no checkpoint to restart it from: "
        "set run.checkpoint_every: 1 to survive a trainer loss, or resume the run with --resume"
    )
