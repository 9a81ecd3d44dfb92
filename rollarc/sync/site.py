"""A site that receives one copy of each update, split into shards across its members, then spreads it inside.

The borrowed site of ``harvest:`` (``rollarc.runtime.harvest_pool``) is the user: every member must end with
the whole weights, but the link into the site is the scarce one. So the trainer encodes the update once per
shard (``site_layouts``: rank ``r`` of ``world`` slices of every tensor), sends shard ``r`` to one member only
(``shard_routes``: its owner), and each shard then fans out inside the site along its own tree rooted at its
owner. The site's cross-site bytes add up to one copy of the update; each member holds every shard in a
``SiteReceiver`` and rebuilds the whole weights with ``assemble`` (bitwise: slices are only concatenated).

Pure: no Ray, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rollarc.sync.shard import ShardSpec, Split, shard_state
from rollarc.sync.topology import Route, site_route
from rollarc.sync.versions import WHOLE, WeightReceiver


def site_layouts(shapes: Mapping[str, Sequence[int]], world: int) -> list[ShardSpec]:
    """The ``world`` layouts that split every tensor of ``shapes`` (name -> shape) into disjoint slices.

    Each tensor is split along its longest dimension (the first on a tie), so no slice is empty unless that
    dimension is shorter than ``world``; a 0-d tensor cannot be split and stays whole in every layout. One
    member is the whole model (``[WHOLE]``), so a site of one sends what the dedicated replicas get.
    """
    if world < 1:
        raise ValueError(f"a site needs at least one shard, got world={world}")
    if world == 1:
        return [WHOLE]
    dims = {name: max(range(len(shape)), key=lambda d: (shape[d], -d)) for name, shape in shapes.items() if shape}
    return [ShardSpec.of({name: Split(dim, rank, world) for name, dim in dims.items()}) for rank in range(world)]


def assemble(parts: Mapping[ShardSpec, Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The whole tensors from the slices of every layout of a site (``site_layouts``), concatenated in rank order."""
    if not parts:
        raise ValueError("nothing to assemble: no layout given")
    first = next(iter(parts.values()))
    whole: dict[str, torch.Tensor] = {}
    for name, tensor in first.items():
        splits = [(layout.split_of(name), state[name]) for layout, state in parts.items()]
        if splits[0][0] is None:  # held whole in every layout
            whole[name] = tensor
            continue
        ranked = sorted((split.rank, split.world, split.dim, t) for split, t in splits if split is not None)
        world, dim = ranked[0][1], ranked[0][2]
        if [rank for rank, *_ in ranked] != list(range(world)):
            raise ValueError(f"{name}: the layouts hold ranks {[r for r, *_ in ranked]} of {world}, not every rank")
        whole[name] = torch.cat([t for *_, t in ranked], dim=dim)
    return whole


def shard_routes(members: Sequence[str], layouts: Sequence[ShardSpec], fanout: int) -> list[tuple[ShardSpec, Route]]:
    """For each layout, the tree that spreads it from its owner to every member.

    Layout ``i`` is owned by ``members[i % len(members)]`` (a site with fewer members than shards gives some
    member two), and its tree is ``site_route`` over the members starting at the owner, so the first hops of
    the shards leave from different members.
    """
    if not members:
        raise ValueError("a site needs at least one member")
    routes = []
    for i, layout in enumerate(layouts):
        start = i % len(members)
        routes.append((layout, site_route([*members[start:], *members[:start]], "tree", fanout)))
    return routes


def fp32_nbytes(state: Mapping[str, torch.Tensor]) -> int:
    """Bytes of one full copy of ``state`` with its floating-point tensors in fp32 (what a plain copy would send)."""
    return sum(t.numel() * (4 if t.is_floating_point() else t.element_size()) for t in state.values())


class SiteReceiver:
    """A member's receiver for every layout of its site; the weights are whole once all layouts are at one version."""

    def __init__(self, layouts: Sequence[ShardSpec], state: Mapping[str, torch.Tensor], version: int | None) -> None:
        """Start from ``state`` (the whole weights of ``version``; None: a member that must catch up first)."""
        if not layouts:
            raise ValueError("a site receiver needs at least one layout")
        self.receivers = {
            layout: WeightReceiver(
                layout,
                state={name: t.clone() for name, t in shard_state(state, layout).items()},
                version=version,
            )
            for layout in layouts
        }

    @property
    def layouts(self) -> list[ShardSpec]:
        return list(self.receivers)

    @property
    def version(self) -> int | None:
        """The version every layout is at; None while they differ (a shard is missing) or none is held."""
        versions = {receiver.version for receiver in self.receivers.values()}
        return versions.pop() if len(versions) == 1 else None

    def weights(self) -> dict[str, torch.Tensor]:
        """The whole weights: split tensors concatenated anew, whole ones the receivers' own (do not modify)."""
        return assemble({layout: receiver.state for layout, receiver in self.receivers.items()})
