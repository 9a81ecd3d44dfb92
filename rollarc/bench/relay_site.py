"""A borrowed site in one process, fed through the training relay's own functions (``rollarc bench weightsync``).

What ``rollarc train`` with ``harvest:`` runs over Ray, step for step, without the actors: the trainer's
``WeightPublisher`` registers the site's shard layouts (``train_worker.register_site``), each version's shard
updates go to their owners along ``sync.site.shard_routes`` (as ``HarvestPool.sync``), every member runs
``site_relay.relay_shard`` / ``apply_shard`` (as ``CoServingReplica.relay``) into a ``SiteReceiver``, and the step's
bytes are ``site_relay.site_bytes`` of the hops (as ``HarvestPool.step_metrics``). Only the transport differs: a
hop hands the updates to the next member's coroutine instead of putting them into the object store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import torch

from rollarc.runtime.site_relay import Hop, apply_shard, relay_shard, site_bytes
from rollarc.runtime.train_worker import register_site
from rollarc.sync.shard import ShardSpec
from rollarc.sync.site import SiteReceiver, shard_routes
from rollarc.sync.topology import Route
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher


def bitwise_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two states hold the same tensors bit for bit (NaN payloads and -0.0 included)."""
    if a.keys() != b.keys():
        return False
    return all(
        a[n].dtype == b[n].dtype
        and a[n].shape == b[n].shape
        and torch.equal(a[n].reshape(-1).view(torch.uint8), b[n].reshape(-1).view(torch.uint8))
        for n in a
    )


class SiteMember:
    """One co-serving replica's weight path: a receiver per layout, relaying as ``CoServingReplica.relay`` does."""

    def __init__(self, name: str, site: InProcessSite) -> None:
        self.name = name
        self.site = site
        self.receiver = SiteReceiver(site.layouts, site.publisher.shard(WHOLE), site.publisher.version)

    async def relay(
        self,
        version: int,
        layout: ShardSpec,
        updates: tuple[VersionedUpdate, ...],
        route: Route,
        source: str,
        cross_site: bool,
    ) -> list[Hop]:
        def forward(child: Route) -> asyncio.Future[list[Hop]]:  # started now, as a Ray call would be
            member = self.site.members[child.member]
            return asyncio.ensure_future(member.relay(version, layout, updates, child, self.name, False))

        async def apply() -> dict[str, object]:
            async def fetch(have: int | None) -> tuple[VersionedUpdate, ...]:
                return self.site.publisher.fetch(layout, have)  # TrainWorker.fetch_weights

            hop, _ = await apply_shard(self.receiver.receivers[layout], version, updates, fetch)
            return hop

        return await relay_shard(self.name, layout, route, source, cross_site, forward, apply)


class InProcessSite:
    """``members`` co-serving replicas holding the publisher's current version, fanning out ``fanout`` per member."""

    def __init__(self, publisher: WeightPublisher, members: int, fanout: int) -> None:
        self.publisher = publisher
        site = register_site(publisher, members)  # TrainWorker.register_site: from the next version on
        self.layouts: list[ShardSpec] = list(site["layouts"])
        self.full_copy_bytes = int(site["full_copy_bytes"])
        self.fanout = fanout
        self.members: dict[str, SiteMember] = {}
        for i in range(members):
            self.members[f"borrowed-{i}"] = SiteMember(f"borrowed-{i}", self)

    def push(self) -> dict[str, int]:
        """Send the publisher's latest version into the site (``HarvestPool.sync``); the step's bytes (``site_bytes``)."""
        version = self.publisher.version
        assert version is not None

        async def deliver() -> list[list[Hop]]:
            routes = shard_routes(list(self.members), self.layouts, self.fanout)
            return await asyncio.gather(
                *(
                    self.members[route.member].relay(
                        version, layout, self.publisher.latest(layout), route, "origin", True
                    )
                    for layout, route in routes
                )
            )

        return site_bytes(hop for hops in asyncio.run(deliver()) for hop in hops)

    def mismatched(self) -> list[str]:
        """Members whose whole weights differ from the publisher's in any bit (compared, not their versions)."""
        expected = self.publisher.shard(WHOLE)
        return [name for name, m in self.members.items() if not bitwise_equal(m.receiver.weights(), expected)]
