"""The borrowed site's relay, one member's part: forward a shard down its route, apply it, record every hop.

There is one relay: ``HarvestPool.sync`` sends each shard of an update to its owner (``sync.site.shard_routes``)
and every ``CoServingReplica.relay`` runs :func:`relay_shard` with Ray calls as ``forward``;
``rollarc bench weightsync`` runs the same functions with in-process members, so the bytes it reports are those
training sends. The step's totals come from :func:`site_bytes` in both. No Ray here: the caller passes how a
child is reached and how a shard is fetched from the trainer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from rollarc.runtime.weight_sync import receive
from rollarc.sync.shard import ShardSpec
from rollarc.sync.topology import Route
from rollarc.sync.versions import VersionedUpdate, WeightReceiver, updates_nbytes

Hop = dict[str, Any]
Forward = Callable[[Route], Awaitable[list[Hop]]]
FetchShard = Callable[[int | None], Awaitable[Sequence[VersionedUpdate]]]


async def relay_shard(
    member: str,
    layout: ShardSpec,
    route: Route,
    source: str,
    cross_site: bool,
    forward: Forward,
    apply: Callable[[], Awaitable[dict[str, Any]]],
    lost: tuple[type[BaseException], ...] = (),
) -> list[Hop]:
    """One member's delivery of a shard: forward it to each child of ``route`` first (``forward`` must start the
    send when called, so the subtree works while this member applies), apply it, then gather the subtree's hops.

    Returns one hop per member reached: ``source``, ``target``, ``cross_site``, ``shard`` and what ``apply``
    reported (``bytes``, ``catch_up_bytes``, ``full_copy``). A child whose delivery raised one of ``lost`` (a member
    that died) is left out with its subtree: the driver catches them up from the trainer.
    """
    pending = [forward(child) for child in route.children]
    hop = await apply()
    hops = [{"source": source, "target": member, "cross_site": cross_site, "shard": layout, **hop}]
    for result in await asyncio.gather(*pending, return_exceptions=True):
        if isinstance(result, lost):
            continue
        if isinstance(result, BaseException):
            raise result
        hops += result
    return hops


async def apply_shard(
    receiver: WeightReceiver, version: int, updates: Sequence[VersionedUpdate], fetch: FetchShard
) -> tuple[dict[str, Any], bool]:
    """Apply a pushed shard update to ``receiver``; a shard that does not fit catches up through ``fetch`` (a delta
    chain or a full copy from the trainer). Returns the hop's bytes and whether the receiver moved (False: it held
    ``version`` already, as a member caught up earlier does)."""
    pushed = updates_nbytes(updates)
    if version <= (receiver.version if receiver.version is not None else -1):
        return {"bytes": pushed, "catch_up_bytes": 0, "full_copy": False}, False
    fetched: list[Sequence[VersionedUpdate]] = []

    async def counted(have: int | None) -> Sequence[VersionedUpdate]:
        got = await fetch(have)
        fetched.append(got)
        return got

    await receive(receiver, updates, counted)
    return {
        "bytes": pushed,
        "catch_up_bytes": sum(updates_nbytes(u) for u in fetched),
        "full_copy": any(u.full for got in fetched for u in got),
    }, True


def site_bytes(hops: Iterable[Hop]) -> dict[str, int]:
    """A step's weight traffic of the borrowed site from its hops (``metrics.jsonl``).

    ``cross_site_bytes``: updates pushed across the boundary (each shard to its owner) plus every catch-up from
    the trainer; ``in_site_bytes``: updates forwarded member to member; ``sync_full_copies``: hops that needed a
    full copy.
    """
    hops = list(hops)
    return {
        "cross_site_bytes": sum(h["bytes"] for h in hops if h["cross_site"]) + sum(h["catch_up_bytes"] for h in hops),
        "in_site_bytes": sum(h["bytes"] for h in hops if h["source"] != "origin"),
        "sync_full_copies": sum(bool(h["full_copy"]) for h in hops),
    }
