"""Finished turns streamed back in chunks: every turn done when the stream next yields travels in one item.

The batched data path (EnvWorker → Router → replica, docs/performance.md) streams completions back with Ray
streaming generators. Each item of such a stream costs a fixed price: an object in the store, a report to the
caller, a wake-up of the caller's event loop, on both hops. The engine finishes turns in bunches (every turn that
stops at one decode step), so one item per turn paid that price 64 times a step for 64 single-turn rollouts, and
the replica's event loop competed with its engine thread for the interpreter while doing it. One item per
bunch keeps the streaming promise (no turn waits for a slower one still running) at a few items a step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

from rollarc.engine.types import Completion

T = TypeVar("T")

# What one item of a batched stream carries: ``(index in the batch's turns, completion)`` of each turn finished
# since the previous item, in index order.
TurnChunk = list[tuple[int, Completion]]


async def chunks_as_completed(futures: Sequence[asyncio.Future[T]]) -> AsyncIterator[list[tuple[int, T]]]:
    """Yield ``(index, result)`` of the futures that are done, all of them at once, until every one is done.

    A future that failed raises its exception from the iteration. Futures still pending when the iteration
    stops are left as they are: cancelling or aborting them is the caller's business.
    """
    index = {id(future): i for i, future in enumerate(futures)}
    pending = set(futures)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        yield sorted(((index[id(future)], future.result()) for future in done), key=lambda item: item[0])
