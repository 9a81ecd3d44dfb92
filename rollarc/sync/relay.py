"""Relay fan-out over Ray: one copy of each update crosses into each site, then spreads inside it.

Receivers are grouped into sites (clusters). The origin (the trainer side, a ``RelayOrigin`` actor
holding a ``WeightPublisher``) sends each site's head one payload: for every layout held in that
site, the newest update (a delta, or a full copy with ``method: full``). Each ``RelayNode`` forwards
to its children along the site's route (``topology``: tree or ring), passing on only the layouts
its subtree holds, then applies its own layout. Every forwarded payload is a new Ray object put by
the forwarding node, so inside a site the bytes move hop by hop, as in a real relay.

Every hop is recorded as a ``Transfer`` (source site, destination site, bytes), so cross-site
traffic is measured, not assumed. A member whose version does not fit the pushed update (it was
detached, joined late, or holds a damaged base) reports it; the origin then sends it a delta chain
or a full copy, whichever is fewer bytes, and counts that traffic too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
import torch

from rollarc.sync.codec import SyncIntegrityError, state_checksums
from rollarc.sync.config import RelayConfig
from rollarc.sync.shard import ShardSpec
from rollarc.sync.topology import Route, Topology, plan_routes
from rollarc.sync.versions import VersionedUpdate, VersionGap, WeightPublisher, WeightReceiver, updates_nbytes

Payload = dict[ShardSpec, tuple[VersionedUpdate, ...]]


@dataclass(frozen=True, slots=True)
class Member:
    """One receiver: its name, the site (cluster) it runs in, and the slices it holds."""

    name: str
    site: str
    layout: ShardSpec = field(default_factory=ShardSpec)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One payload sent from a node in ``src_site`` to a node in ``dst_site``."""

    src_site: str
    dst_site: str
    nbytes: int
    catch_up: bool = False

    @property
    def cross_site(self) -> bool:
        return self.src_site != self.dst_site


@dataclass(frozen=True)
class Directory:
    """Who is where, passed along with every delivery: members by name and their actor handles."""

    members: Mapping[str, Member]
    handles: Mapping[str, Any]

    def layouts(self, route: Route) -> set[ShardSpec]:
        return {self.members[name].layout for name in route.members()}


@dataclass
class DeliveryReport:
    """What a route did: the transfers, each member's version after, and who could not apply the update."""

    transfers: list[Transfer] = field(default_factory=list)
    versions: dict[str, int | None] = field(default_factory=dict)
    lagging: list[str] = field(default_factory=list)

    def merge(self, other: DeliveryReport) -> None:
        self.transfers += other.transfers
        self.versions.update(other.versions)
        self.lagging += other.lagging


@dataclass(frozen=True)
class PushReport:
    """One version pushed to every attached member."""

    version: int
    transfers: tuple[Transfer, ...]
    versions: Mapping[str, int | None]
    caught_up: tuple[str, ...]

    @property
    def cross_site_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers if t.cross_site)

    @property
    def intra_site_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers if not t.cross_site)

    @property
    def catch_up_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers if t.catch_up)


def payload_nbytes(payload: Payload) -> int:
    return sum(updates_nbytes(updates) for updates in payload.values())


@ray.remote(num_cpus=0)
class RelayNode:
    """A receiver that also forwards: applies its own layout's update and passes the payload down its route."""

    def __init__(self, member: Member, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        self.member = member
        self.receiver = WeightReceiver(member.layout)

    def deliver(self, payload: Payload, route: Route, directory: Directory) -> DeliveryReport:
        report = DeliveryReport()
        pending = []
        for child in route.children:  # forward first, so the subtree works while this node applies
            needed = directory.layouts(child)
            forward = {layout: updates for layout, updates in payload.items() if layout in needed}
            report.transfers.append(
                Transfer(self.member.site, directory.members[child.member].site, payload_nbytes(forward))
            )
            pending.append(directory.handles[child.member].deliver.remote(forward, child, directory))
        if not self._apply(payload.get(self.member.layout, ())):
            report.lagging.append(self.member.name)
        report.versions[self.member.name] = self.receiver.version
        for child_report in ray.get(pending):
            report.merge(child_report)
        return report

    def catch_up(self, updates: tuple[VersionedUpdate, ...]) -> tuple[bool, int | None]:
        return self._apply(updates), self.receiver.version

    def version(self) -> int | None:
        return self.receiver.version

    def checksums(self) -> dict[str, int]:
        return state_checksums(self.receiver.state)

    def state(self) -> dict[str, torch.Tensor]:
        return dict(self.receiver.state)

    def _apply(self, updates: Sequence[VersionedUpdate]) -> bool:
        """Apply if the updates start at this node's version; False means it needs a catch-up."""
        if not updates or not self.receiver.fits(updates):
            return False
        try:
            self.receiver.apply(updates)
        except (SyncIntegrityError, VersionGap):
            return False  # the receiver dropped its version: the origin will send a full copy
        return True


@ray.remote(num_cpus=0)
class RelayOrigin:
    """The trainer side: publishes versions and starts one route per site (or per member for ``direct``)."""

    def __init__(self, config: RelayConfig, site: str, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        self.site = site
        self.publisher = WeightPublisher(config)

    def register(self, layouts: Iterable[ShardSpec]) -> None:
        for layout in layouts:
            self.publisher.register(layout)

    def publish(
        self,
        state: Mapping[str, torch.Tensor],
        routes: Sequence[Route],
        directory: Directory,
        version: int | None = None,
    ) -> PushReport:
        version = self.publisher.publish(state, version)
        latest = {layout: self.publisher.latest(layout) for layout in self.publisher.layouts}
        report = DeliveryReport()
        pending = []
        for route in routes:
            payload = {layout: latest[layout] for layout in directory.layouts(route)}
            report.transfers.append(Transfer(self.site, directory.members[route.member].site, payload_nbytes(payload)))
            pending.append(directory.handles[route.member].deliver.remote(payload, route, directory))
        for route_report in ray.get(pending):
            report.merge(route_report)
        caught_up = []
        for name in report.lagging:
            report.versions[name] = self._catch_up(directory, name, report.versions[name], report.transfers)
            caught_up.append(name)
        return PushReport(version, tuple(report.transfers), dict(report.versions), tuple(caught_up))

    def expected_checksums(self, layout: ShardSpec) -> dict[str, int]:
        return state_checksums(self.publisher.shard(layout))

    def _catch_up(self, directory: Directory, name: str, have: int | None, transfers: list[Transfer]) -> int | None:
        """Bring one member up to date directly: a chain or a full copy; a full copy if the chain does not fit."""
        member = directory.members[name]
        for _ in range(2):
            updates = self.publisher.fetch(member.layout, have)
            transfers.append(Transfer(self.site, member.site, updates_nbytes(updates), catch_up=True))
            ok, have = ray.get(directory.handles[name].catch_up.remote(updates))
            if ok:
                return have
        raise RuntimeError(f"relay member {name!r} could not apply a full copy of version {self.publisher.version}")


class WeightRelay:
    """Driver-side handle: one RelayOrigin, one RelayNode per member, and the routes between them."""

    def __init__(
        self,
        members: Sequence[Member],
        config: RelayConfig | None = None,
        origin_site: str = "origin",
        torch_threads: int = 1,
    ) -> None:
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"relay member names must be unique, got {sorted(names)}")
        self.config = config or RelayConfig(method="delta")
        self.members = {m.name: m for m in members}
        self.origin = RelayOrigin.remote(self.config, origin_site, torch_threads)  # type: ignore[attr-defined]  # @ray.remote class
        self.handles = {m.name: RelayNode.remote(m, torch_threads) for m in members}  # type: ignore[attr-defined]  # @ray.remote class
        self.attached = set(names)
        ray.get(self.origin.register.remote({m.layout for m in members}))

    def publish(
        self, state: Mapping[str, torch.Tensor], version: int | None = None, topology: Topology | None = None
    ) -> PushReport:
        """Publish ``state`` as the next version and push it to every attached member."""
        members = {name: m for name, m in self.members.items() if name in self.attached}
        sites: dict[str, list[str]] = {}
        for m in members.values():
            sites.setdefault(m.site, []).append(m.name)
        routes = plan_routes(sites, topology or self.config.topology, self.config.fanout)
        directory = Directory(members, {name: self.handles[name] for name in members})
        report: PushReport = ray.get(self.origin.publish.remote(dict(state), routes, directory, version))
        return report

    def detach(self, name: str) -> None:
        """Stop sending to ``name`` (unreachable, or a borrowed worker handed back); it keeps its weights."""
        self._check(name)
        self.attached.discard(name)

    def attach(self, name: str) -> None:
        """Send to ``name`` again; at the next push it catches up by a delta chain or a full copy."""
        self._check(name)
        self.attached.add(name)

    def versions(self) -> dict[str, int | None]:
        return dict(zip(self.handles, ray.get([h.version.remote() for h in self.handles.values()]), strict=True))

    def verify(self) -> dict[str, bool]:
        """Per member: whether its weights are bitwise those the origin holds for its layout (by checksum)."""
        layouts = {m.layout for m in self.members.values()}
        expected = dict(
            zip(layouts, ray.get([self.origin.expected_checksums.remote(layout) for layout in layouts]), strict=True)
        )
        got = ray.get([self.handles[name].checksums.remote() for name in self.members])
        return {
            name: checksums == expected[self.members[name].layout]
            for name, checksums in zip(self.members, got, strict=True)
        }

    def shutdown(self) -> None:
        for handle in [self.origin, *self.handles.values()]:
            ray.kill(handle)

    def _check(self, name: str) -> None:
        if name not in self.members:
            raise KeyError(f"no relay member {name!r}; members: {sorted(self.members)}")
