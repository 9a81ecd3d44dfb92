"""The caps past which a training run stops (rollarc/runtime/run_limits.py), each at its exact boundary."""

from __future__ import annotations

import pytest

from rollarc.agent.failures import FailureTally
from rollarc.agent.runner import EpisodeSpec
from rollarc.agent.trajectory import Trajectory
from rollarc.runtime.env_worker import GroupResult, GroupSpec
from rollarc.runtime.failure_window import FailureWindow
from rollarc.runtime.run_errors import RunError
from rollarc.runtime.run_limits import (
    check_chunk_retries,
    check_failed_fraction,
    check_group_retries,
    check_replicas_left,
    check_stuck_threads,
    check_trainer_restarts,
)

SPEC = GroupSpec(group_id="g7", index=7, task="maze", seed=107, size=4, redundancy=0, sampling_seed=1, step=0)


def _failed(reason: str) -> Trajectory:
    return Trajectory(traj_id="t", task="maze", seed=107, status="failed", failure_reason=reason, failure_kind="x")


def test_a_group_may_kill_its_env_worker_cap_times_and_stops_the_run_once_more():
    check_group_retries(SPEC, deaths=2, cap=2, last_checkpoint=None)
    with pytest.raises(RunError, match=r"group 7 of task maze \(seed 107\) killed its EnvWorker 3 times") as err:
        check_group_retries(SPEC, deaths=3, cap=2, last_checkpoint="runs/x/checkpoints/step_000004")
    assert str(err.value).endswith("The last good checkpoint is runs/x/checkpoints/step_000004")


def test_a_held_out_chunk_names_its_seed_range_when_it_exceeds_the_cap():
    chunk = [EpisodeSpec(traj_id=f"e{s}", task="maze", seed=s) for s in (9, 3, 5)]
    check_chunk_retries(chunk, deaths=1, cap=1)
    with pytest.raises(RunError, match=r"3 held-out episodes of task maze \(seeds 3\.\.9\) killed their EnvWorker 2"):
        check_chunk_retries(chunk, deaths=2, cap=1)


def test_stuck_env_threads_stop_the_run_at_the_cap_itself():
    check_stuck_threads(GroupResult(SPEC, [], worker="env-0", stuck_env_threads=3), cap=4, last_checkpoint=None)
    with pytest.raises(RunError, match=r"env-0 has 4 env threads stuck .*The last good checkpoint is \(none yet\)"):
        check_stuck_threads(GroupResult(SPEC, [], worker="env-0", stuck_env_threads=4), cap=4, last_checkpoint=None)


def test_trainer_restarts_stop_the_run_at_the_cap_and_count_the_loss_in_hand():
    check_trainer_restarts(restarts=1, cap=2, last_checkpoint=None)
    with pytest.raises(RunError, match=r"lost 3 times \(train.max_trainer_restarts=2\).*Resume from the start"):
        check_trainer_restarts(restarts=2, cap=2, last_checkpoint=None)


def test_the_router_is_asked_only_when_a_turn_found_no_replica():
    asked: list[int] = []

    def none_alive() -> list[str]:
        asked.append(1)
        return []

    check_replicas_left(GroupResult(SPEC, [], failed=[_failed("env step 2: RuntimeError: boom")]), none_alive)
    assert asked == []
    check_replicas_left(GroupResult(SPEC, [], failed=[_failed("NoReplicaError: none")]), lambda: ["rollout-1"])
    with pytest.raises(RunError, match="every rollout worker died"):
        check_replicas_left(GroupResult(SPEC, [], failed=[_failed("no rollout replica answered")]), none_alive)
    assert asked == [1]


def test_the_failed_fraction_stops_a_full_window_over_the_limit_with_its_reasons():
    window = FailureWindow(size=4, max_fraction=0.5)
    tally = FailureTally()
    tally.add_reason("env_step_error:RuntimeError", "boom")
    window.add(ok=2, failed=2)  # 2 of 4: at the limit, not over it
    check_failed_fraction(window, tally)
    window.add(ok=0, failed=1)  # the window slides: 3 of the last 4
    with pytest.raises(RunError, match=r"3 of the last 4 finished trajectories failed.*=0.5 allows; reasons: env_step"):
        check_failed_fraction(window, tally)
