"""Which rollouts of a redundant group are kept (``async.redundancy`` and ``async.redundancy_keep``).

A group starts ``G + r`` rollouts, indices ``0 .. G+r-1``; indices ``>= G`` are the spares. The rule
decides, from each index's state alone, when the kept set is known and what it is; the caller then cancels
whatever still runs. Pure: no Ray, no asyncio, so the runtime's EnvWorker and the reference loop share it.

- ``by_index``: keep the first ``G`` indices, in index order, that finished well. A spare stands in only for
  a rollout that failed, so the kept set depends on which rollouts fail, never on which finish first (a
  slow rollout, e.g. a long successful episode, is waited for, not replaced).
- ``first_finished``: keep the first ``G`` to finish well. It cuts stragglers but favours short episodes
  (docs/failures.md#redundant-rollouts-favour-short-episodes).

In both rules, when too few rollouts finish well the kept set is every one that did (fewer than ``G``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

RolloutState = Literal["running", "ok", "failed"]
KeepRule = Literal["by_index", "first_finished"]


def kept_rollouts(states: Sequence[RolloutState], size: int, rule: KeepRule = "by_index") -> list[int] | None:
    """The kept indices (ascending) once they are decided, else ``None`` (wait for more rollouts to finish).

    ``states[i]`` is rollout ``i``'s state; ``size`` is ``G``. The caller stops at the first result and
    cancels what still runs. Under ``by_index`` that result is also what any later outcome of those rollouts
    would have given: the kept set is the first ``G`` ok indices of the final states.
    """
    if size < 0:
        raise ValueError(f"group size must be >= 0, got {size}")
    if rule == "by_index":
        return _by_index(states, size)
    if rule == "first_finished":
        return _first_finished(states, size)
    raise ValueError(f"unknown redundancy keep rule {rule!r}; expected 'by_index' or 'first_finished'")


def _by_index(states: Sequence[RolloutState], size: int) -> list[int] | None:
    kept: list[int] = []
    for index, state in enumerate(states):
        if len(kept) == size:
            break
        if state == "running":
            return None  # this rollout is kept if it ends well: its outcome is needed
        if state == "ok":
            kept.append(index)
    return kept


def _first_finished(states: Sequence[RolloutState], size: int) -> list[int] | None:
    ok = [index for index, state in enumerate(states) if state == "ok"]
    if len(ok) < size and "running" in states:
        return None
    return ok[:size]  # several that ended in one pass past G: the lowest indices are kept
