"""The ``async:`` section: staleness, in-flight updates, redundancy and the failure budget of rollouts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel
from rollarc.policy.scheduler import DEFAULT_MAX_OVERTAKE, DEFAULT_MAX_RESTARTS


class AsyncConfig(FrozenModel):
    """Trajectory-level asynchrony. ``mode: sync`` is max_staleness 0 plus a barrier."""

    mode: Literal["sync", "async"] = Field(
        "sync", description="`sync`: generate, train and sync in lockstep; `async`: rollout never waits for training"
    )
    max_staleness: int = Field(
        0, ge=0, description="k: no trained token is more than k policy versions old (must be 0 in sync mode)"
    )
    max_overtake: int = Field(
        DEFAULT_MAX_OVERTAKE,
        ge=0,
        description="batches follow admission order: a batch is the groups_per_step earliest-admitted finished "
        "groups, and it may pass over at most this many older groups still running (each stays first in line); "
        "0: strict admission order (docs/async.md#batch-order)",
    )
    on_stale: Literal["drop", "restart"] = Field(
        "drop",
        description="a finished group with no token within max_staleness of the step is dropped, or run again "
        "from scratch with fresh sampling seeds (at most `max_restarts` times, then dropped); both are counted",
    )
    max_restarts: int = Field(
        DEFAULT_MAX_RESTARTS,
        ge=0,
        description="with on_stale: restart, how many times one group is run again before it is dropped",
    )
    in_flight_update: Literal["finish", "abort", "continue"] = Field(
        "finish",
        description="when new weights reach a replica with running turns: `finish` them on the old "
        "weights first, `abort` them and resume each from its partial output on the new ones (the kept tokens "
        "keep their versions and log-probs), or `continue` them on the new weights from the next decode step; "
        "with `abort` and `continue` a turn may mix versions (docs/async.md#in-flight-weight-updates)",
    )
    redundancy: int = Field(
        0,
        ge=0,
        description="r: start G+r rollouts per group; rollouts G..G+r-1 are spares, kept as `redundancy_keep` says",
    )
    redundancy_keep: Literal["by_index", "first_finished"] = Field(
        "by_index",
        description="with redundancy > 0, which G rollouts a group keeps. `by_index`: the first G by rollout index "
        "that finished well; a spare only replaces a rollout that failed (error, timeout, ...), and a slow one is "
        "waited for, so the choice does not depend on finishing order. `first_finished`: the first G to finish "
        "well; cuts stragglers but favours short episodes "
        "(docs/failures.md#redundant-rollouts-favour-short-episodes). Must stay `by_index` with redundancy 0",
    )
    trajectory_timeout_s: float = Field(
        600.0, gt=0.0, description="a trajectory running longer fails (its in-flight turn is aborted)"
    )
    max_group_retries: int = Field(
        3,
        ge=0,
        description="a group (or a chunk of held-out episodes) whose EnvWorker dies is run again on a fresh one, "
        "same seed, at most this many times; one more death stops the run with an error naming its task and seed "
        "(the env or a plugin crashes its process there; docs/failures.md#bounded-retries)",
    )
    max_stuck_env_threads: int = Field(
        128,
        ge=1,
        description="env threads per EnvWorker that may be stuck in env code past step_timeout_s (a thread cannot "
        "be killed, and a replaced pool's stuck threads live on); at this many the worker starts no env call and "
        "the run stops with an error naming it (docs/failures.md#hung-environments)",
    )
    max_failed_fraction: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="stop the run when more than this share of the last groups_per_step × (group_size + "
        "redundancy) finished training trajectories failed (1: never stop for failures; docs/failures.md)",
    )

    @model_validator(mode="after")
    def _sync_has_no_staleness(self) -> AsyncConfig:
        if self.mode == "sync" and self.max_staleness != 0:
            raise ValueError("async.max_staleness must be 0 when async.mode is 'sync' (use mode: async)")
        return self

    @model_validator(mode="after")
    def _restarts_need_restart(self) -> AsyncConfig:
        if self.on_stale == "drop" and self.max_restarts != type(self).model_fields["max_restarts"].default:
            raise ValueError(
                f"async.max_restarts={self.max_restarts} has no effect with async.on_stale='drop'; "
                "set on_stale: restart or remove max_restarts"
            )
        return self

    @model_validator(mode="after")
    def _keep_rule_needs_spares(self) -> AsyncConfig:
        if self.redundancy == 0 and self.redundancy_keep != type(self).model_fields["redundancy_keep"].default:
            raise ValueError(
                f"async.redundancy_keep={self.redundancy_keep!r} has no effect with async.redundancy=0; "
                "set async.redundancy > 0 or remove redundancy_keep"
            )
        return self
