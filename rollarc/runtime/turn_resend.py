"""A batch of turns sent to the router over one stream, and the unanswered ones sent again if the router dies.

Ray restarts the router when it dies (``max_restarts``), but it must not replay ``Router.generate_batch``: the
stream's chunks depend on timing (each holds whatever finished since the previous one), and Ray's replay of a
streaming generator gives the caller only the items past those it has already read. A replay whose first chunks
held other turns than the lost attempt's therefore ended the stream with those turns unanswered (CI, 2026-12-03:
``test_a_restarted_router_routes_to_the_replica_still_lent`` failed with "the router's batch ended before every
turn had its completion"). So the method is marked ``max_task_retries=0``, and the caller, which knows exactly
which turns are still unanswered, sends those again, with a growing pause while the router restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ray.exceptions import RayActorError, RayError

from rollarc.agent.turn import GenerationFailure
from rollarc.engine.types import Completion, EngineDeadError
from rollarc.policy.routing import NoReplicaError
from rollarc.runtime.turn_chunks import TurnChunk

MAX_RESENDS = 8
FIRST_PAUSE_S = 0.1  # doubled after each resend: 8 resends wait 25.5 s in all, ample for a router restart

# ``open_stream(indices)`` sends the turns at ``indices`` in one call; a chunk's indices are positions in ``indices``.
StreamOpener = Callable[[list[int]], AsyncIterator[Awaitable[TurnChunk]]]


class RouterLostTurns(RuntimeError):
    """The router did not answer some turns of a batch, after every resend."""


# What a turn can end with instead of a completion once the router's failovers are spent (no replica left, a dead
# engine it could not fail over from) or the router stayed gone. A Ray error raised by the router is typed as its
# cause too (``RayTaskError(NoReplicaError)``), so it matches here.
TURN_LOST = (NoReplicaError, EngineDeadError, RouterLostTurns)


def lost_turn(err: Exception) -> GenerationFailure:
    """``err`` (one of ``TURN_LOST``) as the failure of the turn's trajectory, counted by kind
    (``generation_error:NoReplicaError``), in one line: the cause's message, not Ray's traceback."""
    cause = getattr(err, "cause", None) or err
    name = type(cause).__name__
    return GenerationFailure(f"{name}: {cause}", kind=f"generation_error:{name}")


async def send_until_answered(
    open_stream: StreamOpener,
    futures: Sequence[asyncio.Future[Completion]],
    max_resends: int = MAX_RESENDS,
    first_pause_s: float = FIRST_PAUSE_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_resend: Callable[[], None] = lambda: None,
) -> int:
    """Resolve each future with its turn's completion; returns how many times unanswered turns were sent again.

    ``on_resend`` is called just before each resend, so a caller that counts resends has counted this one before
    any resent turn resolves (and its trajectory, or the whole group, can finish and report the count).

    A turn whose future is already done (its trajectory was cancelled) is not sent again. An error other than
    the router's death (a bad turn, no replica left) fails every unanswered turn at once; so does a router that
    is still gone after ``max_resends`` resends.
    """
    resends = 0
    try:
        while True:
            unanswered = [i for i, future in enumerate(futures) if not future.done()]
            if not unanswered:
                return resends
            cause: Exception
            try:
                async for ref in open_stream(unanswered):
                    for position, completion in await ref:
                        future = futures[unanswered[position]]
                        if not future.done():
                            future.set_result(completion)
            except RayActorError as err:  # the router died mid-stream; Ray is restarting it
                cause = err
            except (
                RayError
            ) as err:  # the router raised (a bad turn, no replica left): each unanswered turn re-raises it
                _fail(futures, err)
                return resends
            else:
                cause = RouterLostTurns("the router's batch ended before every turn had its completion")
            if not any(not future.done() for future in futures):
                return resends
            if resends == max_resends:
                left = sum(not future.done() for future in futures)
                _fail(futures, RouterLostTurns(f"{left} turns unanswered after {max_resends} resends: {cause}"))
                return resends
            await sleep(first_pause_s * 2**resends)
            resends += 1
            on_resend()
    finally:  # anything unexpected (or cancellation) propagates, but no trajectory is left waiting for its turn
        _fail(futures, RouterLostTurns("the batch's sender stopped before every turn had its completion"))


def _fail(futures: Sequence[asyncio.Future[Completion]], err: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(err)
