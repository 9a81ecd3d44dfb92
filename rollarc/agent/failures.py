"""Failed trajectories counted by kind, with a few whole messages of each kind as examples.

A reason such as ``env step 2: RuntimeError: boom`` says where (turn 2) and what (the exception and its
message). Counting reasons by their text splits one problem over every turn number; cutting them at
the first colon (as rollarc once did) threw the cause away and made a timeout look like an exception.
So each failure carries a *kind* (``env_step_timeout``, ``env_step_error:RuntimeError``,
``env_construction_error:EnvLoadError``, ``trajectory_timeout``, ``reward_failure``,
``generation_error``, ...), counts go by kind, and the first few distinct messages of each kind are
kept whole, so a summary says both how often and why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollarc.agent.trajectory import Trajectory

EXAMPLES_PER_KIND = 3
MAX_EXAMPLE_CHARS = 500  # an env may raise with a huge message; a summary keeps its head


@dataclass
class FailureTally:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, traj: Trajectory) -> None:
        self.add_reason(traj.failure_kind or "other", traj.failure_reason or "unknown")

    def add_reason(self, kind: str, message: str) -> None:
        self.counts[kind] += 1
        shown = self.examples.setdefault(kind, [])
        message = message[:MAX_EXAMPLE_CHARS]
        if len(shown) < EXAMPLES_PER_KIND and message not in shown:
            shown.append(message)

    def as_dict(self) -> dict[str, Any]:
        """``failure_reasons`` (count per kind) and ``failure_examples`` (whole messages per kind)."""
        return {
            "failure_reasons": dict(self.counts),
            "failure_examples": {k: list(v) for k, v in self.examples.items()},
        }

    def describe(self, top: int = 3) -> str:
        """One line: the most common kinds with their counts and one example message each."""
        parts = []
        for kind, count in self.counts.most_common(top):
            example = (self.examples.get(kind) or [""])[0]
            parts.append(f"{kind} ({count}), e.g. {example!r}" if example else f"{kind} ({count})")
        return "; ".join(parts) if parts else "none recorded"
