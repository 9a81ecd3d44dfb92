"""WeightSync: versioned weights from the TrainWorker to every RolloutWorker through the object store.

The TrainWorker publishes each new version once into a :class:`rollarc.sync.WeightPublisher`
(``sync.method: full`` sends the whole weights, ``delta`` the lossless sparse change) and puts the
update into the Ray object store once; every RolloutWorker fetches it by reference (shared memory on
one node, one transfer per node across nodes) and patches its own copy with a
:class:`rollarc.sync.WeightReceiver`. A receiver that does not fit the update (it missed a version,
or a checksum fails) asks the trainer for a catch-up chain or a full copy, so a mismatch is never
applied silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rollarc.sync.codec import SyncIntegrityError
from rollarc.sync.shard import ShardSpec
from rollarc.sync.versions import WHOLE, VersionedUpdate, VersionGap, WeightReceiver, updates_nbytes


@dataclass
class ShardPayload:
    """One layout's update of a version, as a hop into or inside the borrowed site carries it."""

    version: int
    layout: ShardSpec
    refs: list[Any] = field(default_factory=list)  # one object ref to the tuple of VersionedUpdates
    nbytes: int = 0


@dataclass
class SyncPayload:
    version: int
    method: str
    refs: list[Any] = field(default_factory=list)  # one object ref to the tuple of VersionedUpdates
    nbytes: int = 0
    model_bytes: int = 0
    shards: dict[ShardSpec, ShardPayload] = field(default_factory=dict)  # the borrowed site's layouts, if any

    def of(self, layout: ShardSpec) -> ShardPayload:
        """The update of ``layout``: the whole-model one every dedicated replica fetches, or a registered shard's."""
        if layout == WHOLE:
            return ShardPayload(self.version, WHOLE, self.refs, self.nbytes)
        if layout not in self.shards:
            raise KeyError(f"no update of {layout.describe()} was published; register the layout with the trainer")
        return self.shards[layout]


@dataclass
class ReceiveReport:
    version: int
    nbytes: int
    recovered: bool


Fetch = Callable[[int | None], Awaitable[Sequence[VersionedUpdate]]]


async def receive(receiver: WeightReceiver, updates: Sequence[VersionedUpdate], fetch: Fetch) -> ReceiveReport:
    """Apply pushed ``updates``; when they do not fit, catch up with what ``fetch`` returns (chain or full)."""
    nbytes = updates_nbytes(updates)
    recovered = False
    if not receiver.fits(updates):
        updates = await fetch(receiver.version)
        nbytes += updates_nbytes(updates)
        recovered = True
    try:
        receiver.apply(updates)
    except (VersionGap, SyncIntegrityError):
        full = await fetch(None)
        nbytes += updates_nbytes(full)
        receiver.apply(full)
        recovered = True
    assert receiver.version is not None
    return ReceiveReport(receiver.version, nbytes, recovered)


def engine_weights(receiver: WeightReceiver, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The receiver's weights in the engine's dtypes (a bf16 wire format is widened exactly)."""
    return engine_state(receiver.state, like)


def engine_state(state: Mapping[str, torch.Tensor], like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` in the engine's dtypes (a bf16 wire format is widened exactly)."""
    return {name: tensor.to(like[name].dtype) for name, tensor in state.items()}
