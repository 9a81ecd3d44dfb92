"""What a run counts about its groups and trajectories, saved with each checkpoint so a resumed run counts on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollarc.agent.failures import FailureTally


@dataclass
class Counters:
    groups_started: int = 0
    groups_trained: int = 0
    dropped_stale: int = 0
    restarted_stale: int = 0
    dropped_failed: int = 0
    dropped_no_signal: int = 0  # dynamic sampling: all rewards equal, dropped before a batch
    kept_no_signal: int = 0  # dynamic sampling: all rewards equal past the per-step cap, trained
    failed_trajectories: int = 0
    failures: FailureTally = field(default_factory=FailureTally)
    env_worker_restarts: int = 0
    retried_groups: int = 0
    retried_eval_chunks: int = 0  # held-out episode chunks run again after their EnvWorker died

    def as_dict(self) -> dict[str, Any]:
        return {
            "groups_started": self.groups_started,
            "groups_trained": self.groups_trained,
            "dropped_stale_groups": self.dropped_stale,
            "restarted_stale_groups": self.restarted_stale,
            "dropped_failed_groups": self.dropped_failed,
            "dropped_no_signal_groups": self.dropped_no_signal,
            "kept_no_signal_groups": self.kept_no_signal,
            "failed_trajectories": self.failed_trajectories,
            **self.failures.as_dict(),
            "env_worker_restarts": self.env_worker_restarts,
            "retried_groups": self.retried_groups,
            "retried_eval_chunks": self.retried_eval_chunks,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Counters:
        """The counters :meth:`as_dict` wrote (a checkpoint's), so a resumed run counts on from them."""
        return cls(
            groups_started=int(saved.get("groups_started", 0)),
            groups_trained=int(saved.get("groups_trained", 0)),
            dropped_stale=int(saved.get("dropped_stale_groups", 0)),
            restarted_stale=int(saved.get("restarted_stale_groups", 0)),
            dropped_failed=int(saved.get("dropped_failed_groups", 0)),
            dropped_no_signal=int(saved.get("dropped_no_signal_groups", 0)),
            kept_no_signal=int(saved.get("kept_no_signal_groups", 0)),
            failed_trajectories=int(saved.get("failed_trajectories", 0)),
            failures=FailureTally(
                counts=Counter({str(k): int(v) for k, v in saved.get("failure_reasons", {}).items()}),
                examples={str(k): [str(m) for m in v] for k, v in saved.get("failure_examples", {}).items()},
            ),
            env_worker_restarts=int(saved.get("env_worker_restarts", 0)),
            retried_groups=int(saved.get("retried_groups", 0)),
            retried_eval_chunks=int(saved.get("retried_eval_chunks", 0)),
        )
