"""``chunks_as_completed``: every future done when the stream yields travels in one chunk, in index order."""

from __future__ import annotations

import asyncio

import pytest

from rollarc.runtime.turn_chunks import chunks_as_completed


def test_futures_done_together_come_in_one_chunk_and_later_ones_in_later_chunks():
    async def go():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(5)]
        for i in (3, 0, 4):
            futures[i].set_result(f"r{i}")
        stream = chunks_as_completed(futures)
        first = await anext(stream)
        futures[2].set_result("r2")
        second = await anext(stream)
        futures[1].set_result("r1")
        rest = [chunk async for chunk in stream]
        return first, second, rest

    first, second, rest = asyncio.run(go())
    assert first == [(0, "r0"), (3, "r3"), (4, "r4")]
    assert second == [(2, "r2")]
    assert rest == [[(1, "r1")]]


def test_a_failed_future_raises_from_the_iteration_and_pending_ones_are_left_alone():
    async def go():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(2)]
        futures[0].set_exception(ValueError("bad prompt"))
        with pytest.raises(ValueError, match="bad prompt"):
            async for _ in chunks_as_completed(futures):
                pass
        return futures[1].cancelled(), futures[1].done()

    assert asyncio.run(go()) == (False, False)
