"""When a training run gives up: the caps past which going on would loop forever or train on nothing.

Each check raises :class:`~rollarc.runtime.run_errors.RunError` with one line naming the cap, what crossed it
and where the run can resume; the controller and the held-out evaluation call them with what they counted.
"""

from __future__ import annotations

from collections.abc import Callable

from rollarc.agent.failures import FailureTally
from rollarc.agent.runner import EpisodeSpec
from rollarc.runtime.env_worker import GroupResult, GroupSpec
from rollarc.runtime.failure_window import FailureWindow
from rollarc.runtime.run_errors import RunError


def _last_good(checkpoint: str | None) -> str:
    return f"The last good checkpoint is {checkpoint or '(none yet)'}"


def check_group_retries(spec: GroupSpec, deaths: int, cap: int, last_checkpoint: str | None) -> None:
    """``async.max_group_retries``: a group whose EnvWorker died more often than that crashes it on its seed;
    running it again would loop forever."""
    if deaths > cap:
        raise RunError(
            f"group {spec.index} of task {spec.task} (seed {spec.seed}) killed its EnvWorker {deaths} times "
            f"(async.max_group_retries={cap}); the env or a plugin crashes its process on this seed. "
            f"{_last_good(last_checkpoint)}"
        )


def check_chunk_retries(chunk: list[EpisodeSpec], deaths: int, cap: int) -> None:
    """``async.max_group_retries`` for held-out episodes: a chunk that keeps killing its EnvWorker stops the run."""
    if deaths > cap:
        tasks = sorted({spec.task for spec in chunk})
        seeds = sorted(spec.seed for spec in chunk)
        raise RunError(
            f"{len(chunk)} held-out episodes of task {', '.join(tasks)} (seeds {seeds[0]}..{seeds[-1]}) killed "
            f"their EnvWorker {deaths} times (async.max_group_retries={cap}); the env or a plugin crashes its "
            "process on one of these seeds"
        )


def check_stuck_threads(result: GroupResult, cap: int, last_checkpoint: str | None) -> None:
    """Stop once an EnvWorker holds as many stuck env threads as allowed: it starts no env call any more."""
    if result.stuck_env_threads >= cap:
        raise RunError(
            f"{result.worker} has {result.stuck_env_threads} env threads stuck in env code past "
            f"step_timeout_s (async.max_stuck_env_threads={cap}): an env ignores its timeout and hangs; fix it "
            f"or raise the cap. {_last_good(last_checkpoint)}"
        )


def check_trainer_restarts(restarts: int, cap: int, last_checkpoint: str | None) -> None:
    """``train.max_trainer_restarts``: a trainer lost again after that many restarts dies of its own work (out of
    memory on every step, a crash); restarting it again would loop forever."""
    if restarts >= cap:
        raise RunError(
            f"the trainer was lost {restarts + 1} times (train.max_trainer_restarts={cap}); it dies "
            f"on every step (out of memory? see its log). Resume from {last_checkpoint or 'the start'}"
        )


def check_replicas_left(result: GroupResult, alive_rollouts: Callable[[], list[str]]) -> None:
    """A group whose turns found no rollout replica, with none alive: nothing is left to generate.

    ``alive_rollouts`` asks the router, so it is called only when a turn found no replica."""
    reasons = [t.failure_reason or "" for t in result.failed]
    if any("no rollout replica" in r or "NoReplicaError" in r for r in reasons) and not alive_rollouts():
        raise RunError("every rollout worker died; no replica is left to generate")


def check_failed_fraction(failures: FailureWindow, reasons: FailureTally) -> None:
    """``async.max_failed_fraction``: stop when too many of the last B×(G+r) finished trajectories failed."""
    if failures.exceeded():
        raise RunError(
            f"{failures.failed} of the last {failures.size} finished trajectories failed, more than "
            f"async.max_failed_fraction={failures.max_fraction:g} allows; reasons: {reasons.describe()}"
        )
