"""The scores of one answer as a value that crosses a process boundary, a function's failure travelling as its reason.

Why: with ``dataset.reward_placement: serverless`` the reward functions run in a Ray Serve replica, and a
function that raises there must still be the same counted per-trajectory failure, with the same one-line
reason, as in the env worker. An exception raised inside a replica reaches the caller wrapped in Ray's
error with a remote traceback for a message; an :class:`Outcome` carries the reason itself, and
:func:`scores_of` raises the same :class:`RewardFunctionError` on the caller's side. Scores are Python
floats, which pickle exactly, so served rewards are bitwise those of the local path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollarc.data.reward_fn import Answer, RewardFunction, RewardFunctionError


@dataclass(frozen=True)
class Outcome:
    """Each function's score of one answer (None: a TRL function said it does not apply), or why scoring failed."""

    scores: tuple[float | None, ...] = ()
    error: str | None = None


def score_answer(functions: Sequence[RewardFunction], answer: Answer) -> Outcome:
    """Score ``answer`` with every function; the first failing function's reason instead of raising."""
    try:
        return Outcome(scores=tuple(f.score(answer) for f in functions))
    except RewardFunctionError as err:
        return Outcome(error=str(err))


def scores_of(outcome: Outcome) -> list[float | None]:
    """The scores of ``outcome``; a failed one raises :class:`RewardFunctionError` with its reason."""
    if outcome.error is not None:
        raise RewardFunctionError(outcome.error)
    return list(outcome.scores)
