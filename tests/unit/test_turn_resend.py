"""``send_until_answered``: turns the router left unanswered (it died mid-stream, or a replayed stream skipped them)
are sent again, exactly those; other errors fail the batch at once; a router that stays gone fails it after the cap.

Regression test for CI of 2026-12-03 (``test_a_restarted_router_routes_to_the_replica_still_lent``): a restarted
router's replayed stream ended with turns unanswered, and their trajectories failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from ray.exceptions import ActorUnavailableError, RayTaskError

from rollarc.runtime.turn_resend import RouterLostTurns, send_until_answered


async def _ready(value: Any) -> Any:
    return value


class ScriptedRouter:
    """Each call answers the turns its script names (by position in the call) and then ends, or raises."""

    def __init__(self, scripts: list[tuple[list[list[int]], Exception | None]]):
        self.scripts = scripts
        self.calls: list[list[int]] = []

    def open_stream(self, indices: list[int]) -> AsyncIterator[Awaitable[list[tuple[int, str]]]]:
        self.calls.append(list(indices))
        chunks, error = self.scripts[len(self.calls) - 1]

        async def stream() -> AsyncIterator[Awaitable[list[tuple[int, str]]]]:
            for chunk in chunks:
                yield _ready([(position, f"done-{indices[position]}") for position in chunk])
            if error is not None:
                raise error

        return stream()


def _run(router: ScriptedRouter, n: int, cancel: tuple[int, ...] = (), **kwargs: Any) -> tuple[int, list[Any]]:
    async def go() -> tuple[int, list[Any]]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(n)]
        for i in cancel:
            futures[i].cancel()
        resends = await send_until_answered(router.open_stream, futures, first_pause_s=0.0, **kwargs)
        outcomes = [
            "cancelled" if f.cancelled() else (f.exception() if f.exception() is not None else f.result())
            for f in futures
        ]
        return resends, outcomes

    return asyncio.run(go())


def test_a_stream_that_ends_with_turns_unanswered_sends_exactly_those_again():
    # the first call answers turns 0 and 2 (in two chunks) and ends; the resend of [1, 3] answers both
    router = ScriptedRouter([([[0], [2]], None), ([[1, 0]], None)])
    resends, outcomes = _run(router, 4)
    assert router.calls == [[0, 1, 2, 3], [1, 3]]
    assert resends == 1 and outcomes == ["done-0", "done-1", "done-2", "done-3"]


def test_a_router_that_dies_mid_stream_gets_the_unanswered_turns_again_and_cancelled_ones_are_not_sent():
    died = ActorUnavailableError("router restarting", None)
    router = ScriptedRouter([([[1]], died), ([], died), ([[0]], None)])
    resends, outcomes = _run(router, 3, cancel=(2,))
    assert router.calls == [[0, 1], [0], [0]]
    assert resends == 2 and outcomes == ["done-0", "done-1", "cancelled"]


def test_an_error_other_than_the_routers_death_fails_every_unanswered_turn_without_a_resend():
    bad = RayTaskError("Router.generate_batch", "traceback", ValueError("prompt longer than max_model_len"))
    router = ScriptedRouter([([[0]], bad)])
    resends, outcomes = _run(router, 3)
    assert router.calls == [[0, 1, 2]] and resends == 0
    assert outcomes[0] == "done-0" and outcomes[1] is bad and outcomes[2] is bad


def test_a_router_still_gone_after_the_cap_fails_the_unanswered_turns_with_the_count_and_cause():
    died = ActorUnavailableError("router restarting", None)
    router = ScriptedRouter([([[0]], died)] + [([], died)] * 3)
    resends, outcomes = _run(router, 2, max_resends=3)
    assert router.calls == [[0, 1], [1], [1], [1]] and resends == 3
    assert outcomes[0] == "done-0"
    assert isinstance(outcomes[1], RouterLostTurns)
    assert "1 turns unanswered after 3 resends" in str(outcomes[1]) and "router restarting" in str(outcomes[1])


def test_a_batch_answered_in_one_stream_is_sent_once():
    router = ScriptedRouter([([[1], [0, 2]], None)])
    assert _run(router, 3) == (0, ["done-0", "done-1", "done-2"])
    assert router.calls == [[0, 1, 2]]


@pytest.mark.parametrize("pause", [0.0, 0.01])
def test_the_pause_doubles_between_resends(pause):
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    died = ActorUnavailableError("router restarting", None)
    router = ScriptedRouter([([], died)] * 3 + [([[0]], None)])

    async def go() -> int:
        future = asyncio.get_running_loop().create_future()
        return await send_until_answered(router.open_stream, [future], first_pause_s=pause, sleep=record_sleep)

    assert asyncio.run(go()) == 3
    assert slept == [pause, 2 * pause, 4 * pause]


def test_an_unexpected_error_propagates_and_leaves_no_turn_waiting():
    router = ScriptedRouter([([[0]], KeyError("a bug in the caller"))])

    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(3)]
        with pytest.raises(KeyError, match="a bug in the caller"):
            await send_until_answered(router.open_stream, futures, first_pause_s=0.0)
        return [f.result() if f.exception() is None else f.exception() for f in futures]

    outcomes = asyncio.run(go())
    assert outcomes[0] == "done-0"
    assert all(isinstance(o, RouterLostTurns) and "sender stopped" in str(o) for o in outcomes[1:])


def test_a_resend_is_counted_before_any_resent_turn_resolves():
    # Regression (CI 2026-12-03): the EnvWorker added the count when the call returned, after the resent stream's
    # end; the group's trajectories had already finished and its result reported 0 resends.
    router = ScriptedRouter([([], ActorUnavailableError("router restarting", None)), ([[0], [1]], None)])
    counted: list[int] = []
    seen_at_resolve: list[int] = []

    async def go() -> int:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(2)]
        for future in futures:
            future.add_done_callback(lambda _: seen_at_resolve.append(len(counted)))
        return await send_until_answered(
            router.open_stream, futures, first_pause_s=0.0, on_resend=lambda: counted.append(1)
        )

    assert asyncio.run(go()) == 1
    assert counted == [1] and seen_at_resolve == [1, 1]
