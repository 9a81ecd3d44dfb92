"""DiT weights from the t2i trainer to its sampler and explorers through ``rollarc.sync``, as on the LLM path.

The trainer keeps a :class:`~rollarc.sync.versions.WeightPublisher` and publishes each optimiser step as a
version (its initial weights too, so the first step already travels as a delta). Every receiving role (the
sampler, the explorer, each spot worker) keeps a :class:`DiTReceiver`: its own copy of the DiT's state at
the version it holds, patched by the publisher's updates and then loaded into the policy. An update that
starts at the receiver's version is applied as a delta; otherwise (the receiver missed a version, or is a
spot replacement that just joined with the weights of the run's start) it takes a full copy, so a mismatch is
never applied silently (checksums of the base are part of every delta).

The settings are fixed rather than read from the t2i config: the DiT is trained and sampled in fp32, so the
wire dtype must stay fp32 for the receivers to equal the trainer bitwise; with fp32 Adam nearly every weight
changes each step, and the codec then sends each range dense, so a delta costs about a full copy. The point
here is the versioning and the accounting (bytes per hop in ``metrics.jsonl``), not compression.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from rollarc.sync.codec import SyncIntegrityError
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, VersionedUpdate, VersionGap, WeightPublisher, WeightReceiver, updates_nbytes

# history 2: a spot worker explores with the previous version, so one version behind must still get a delta
DIT_SYNC = SyncConfig(method="delta", history=2, dtype=None)


def dit_publisher(state: Mapping[str, torch.Tensor], version: int) -> WeightPublisher:
    """A publisher holding the trainer's weights at ``version`` (what every receiver starts from)."""
    publisher = WeightPublisher(DIT_SYNC)
    publisher.publish(state, version)
    return publisher


@dataclass(frozen=True, slots=True)
class Received:
    """What one sync cost a receiver: the bytes it was sent and whether a full copy was among them."""

    version: int
    nbytes: int
    full: bool


Fetch = Callable[[int | None], Sequence[VersionedUpdate]]


class DiTReceiver:
    """One role's copy of the DiT weights and their version, patched by versioned updates."""

    def __init__(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        own = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in state.items()}
        self.receiver = WeightReceiver(WHOLE, own, version)

    @property
    def version(self) -> int | None:
        return self.receiver.version

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return dict(self.receiver.state)

    def sync(self, updates: Sequence[VersionedUpdate], fetch: Fetch) -> Received:
        """Apply ``updates``; when they do not start at this version, or a base checksum fails, ``fetch`` a
        catch-up (``fetch(have)``) or a full copy (``fetch(None)``) instead."""
        nbytes, full = updates_nbytes(updates), any(u.full for u in updates)
        if not self.receiver.fits(updates):
            updates = fetch(self.receiver.version)
            nbytes += updates_nbytes(updates)
            full = full or any(u.full for u in updates)
        try:
            self.receiver.apply(updates)
        except (VersionGap, SyncIntegrityError):
            copy = fetch(None)
            nbytes += updates_nbytes(copy)
            self.receiver.apply(copy)
            full = True
        if self.receiver.version is None:
            raise RuntimeError("a sync left the receiver without a version")
        return Received(self.receiver.version, nbytes, full)
