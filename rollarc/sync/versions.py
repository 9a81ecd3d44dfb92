"""Versioned weight publishing: a receiver at any version gets a delta chain or a full copy, whichever is fewer bytes.

``WeightPublisher`` (trainer side) keeps its own copy of the latest weights and, with
``method: delta``, the last ``history`` deltas of every registered layout. ``WeightReceiver``
(rollout side) holds its shard and its version. When a delta does not fit (the receiver missed
versions, holds another base, or the bytes are damaged), the receiver drops its version and asks
for a full copy: a mismatch is never applied silently.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import torch

from rollarc.sync.codec import DeltaBucket, SyncIntegrityError, apply_delta, encode_delta, encode_full, full_nbytes
from rollarc.sync.config import SyncConfig
from rollarc.sync.shard import ShardSpec, shard_state

WHOLE = ShardSpec()


class VersionGap(ValueError):
    """An update whose base is not the receiver's version (it missed versions, or holds none)."""


@dataclass(frozen=True, slots=True)
class VersionedUpdate:
    """The buckets that take a ``layout`` from ``base_version`` (None: from nothing, a full copy) to ``version``."""

    layout: ShardSpec
    base_version: int | None
    version: int
    buckets: tuple[DeltaBucket, ...]

    @property
    def full(self) -> bool:
        return self.base_version is None

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    @property
    def model_bytes(self) -> int:
        return sum(b.model_bytes for b in self.buckets)


def updates_nbytes(updates: Sequence[VersionedUpdate]) -> int:
    return sum(u.nbytes for u in updates)


class WeightPublisher:
    """Trainer side: publish each new version once; serve any layout at any version from it."""

    def __init__(self, config: SyncConfig | None = None) -> None:
        self.config = config or SyncConfig()
        self.version: int | None = None
        self._state: dict[str, torch.Tensor] | None = None
        self._history: dict[ShardSpec, deque[VersionedUpdate]] = {WHOLE: deque(maxlen=self.config.history)}

    @property
    def layouts(self) -> list[ShardSpec]:
        return list(self._history)

    def register(self, layout: ShardSpec) -> None:
        """Keep deltas for ``layout`` from the next version on (a new layout is first served a full copy)."""
        if self._state is not None:
            shard_state(self._state, layout)  # fails now, naming the tensor, if the layout does not fit the model
        self._history.setdefault(layout, deque(maxlen=self.config.history))

    def publish(self, state: Mapping[str, torch.Tensor], version: int | None = None) -> int:
        """Take a copy of ``state`` as the next version (default: previous + 1, starting at 0)."""
        if version is None:
            version = 0 if self.version is None else self.version + 1
        elif self.version is not None and version <= self.version:
            raise ValueError(f"version must increase: published {self.version}, got {version}")
        new = {name: self._copy(tensor) for name, tensor in state.items()}
        old = self._state
        if self.config.method == "delta" and self.config.history > 0 and old is not None and _same_layout(old, new):
            for layout, history in self._history.items():
                buckets = encode_delta(
                    shard_state(old, layout),
                    shard_state(new, layout),
                    bucket_bytes=self.config.bucket_bytes,
                    dense_threshold=self.config.dense_threshold,
                    compress=self.config.compress,
                )
                history.append(VersionedUpdate(layout, self.version, version, tuple(buckets)))
        else:
            for history in self._history.values():
                history.clear()  # after a skipped delta no chain can cross this version
        self._state, self.version = new, version
        return version

    def _copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """A private CPU copy, in ``config.dtype`` if the tensor is floating point."""
        dtype = getattr(torch, self.config.dtype) if self.config.dtype and tensor.is_floating_point() else tensor.dtype
        return tensor.detach().to("cpu", dtype=dtype, copy=True).contiguous()

    def latest(self, layout: ShardSpec) -> tuple[VersionedUpdate, ...]:
        """What to push to receivers of ``layout`` that are one version behind: the newest delta, else a full copy."""
        history = self._history.get(layout)
        if history and history[-1].version == self.version:
            return (history[-1],)
        return (self.full(layout),)

    def fetch(self, layout: ShardSpec, have: int | None) -> tuple[VersionedUpdate, ...]:
        """Bring a receiver of ``layout`` at version ``have`` up to date: a delta chain or a full copy, by bytes."""
        if self.version is None:
            raise RuntimeError("nothing has been published yet")
        if have == self.version:
            return ()
        chain = self._chain(layout, have)
        if chain and updates_nbytes(chain) < self.full_nbytes(layout):
            return chain
        return (self.full(layout),)

    def full(self, layout: ShardSpec) -> VersionedUpdate:
        state = self._require_state()
        buckets = tuple(encode_full(shard_state(state, layout), bucket_bytes=self.config.bucket_bytes))
        return VersionedUpdate(layout, None, self._require_version(), buckets)

    def full_nbytes(self, layout: ShardSpec) -> int:
        return full_nbytes(shard_state(self._require_state(), layout), bucket_bytes=self.config.bucket_bytes)

    def shard(self, layout: ShardSpec) -> dict[str, torch.Tensor]:
        """The current weights as ``layout`` sees them (for checks; views, do not modify)."""
        return shard_state(self._require_state(), layout)

    def _chain(self, layout: ShardSpec, have: int | None) -> tuple[VersionedUpdate, ...]:
        history = list(self._history.get(layout, ()))
        for i, update in enumerate(history):
            if have is not None and update.base_version == have:
                return tuple(history[i:])
        return ()

    def _require_state(self) -> dict[str, torch.Tensor]:
        if self._state is None:
            raise RuntimeError("nothing has been published yet")
        return self._state

    def _require_version(self) -> int:
        if self.version is None:
            raise RuntimeError("nothing has been published yet")
        return self.version


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one ``WeightReceiver.sync`` did."""

    version: int | None
    nbytes: int
    updates: int
    full: bool
    recovered: bool  # a delta did not fit and a full copy was fetched instead


Fetch = Callable[[ShardSpec, int | None], Sequence[VersionedUpdate]]


class WeightReceiver:
    """Rollout side: the weights of one layout, patched in place, and the version they are at."""

    def __init__(
        self,
        layout: ShardSpec = WHOLE,
        state: MutableMapping[str, torch.Tensor] | None = None,
        version: int | None = None,
    ) -> None:
        if version is not None and state is None:
            raise ValueError("a receiver with a version needs the state of that version")
        self.layout = layout
        self.state: MutableMapping[str, torch.Tensor] = state if state is not None else {}
        self.version = version

    def fits(self, updates: Sequence[VersionedUpdate]) -> bool:
        """Whether ``updates`` start where this receiver is (a full copy always fits)."""
        return not updates or updates[0].full or updates[0].base_version == self.version

    def apply(self, updates: Sequence[VersionedUpdate]) -> None:
        """Apply updates in order. On any mismatch the version becomes None (a full copy is needed) and it re-raises."""
        for update in updates:
            if update.layout != self.layout:
                raise ValueError(
                    f"update for {update.layout.describe()} sent to a receiver of {self.layout.describe()}"
                )
            if not update.full and update.base_version != self.version:
                raise VersionGap(
                    f"update {update.base_version}->{update.version} does not start at the "
                    f"receiver's version {self.version}"
                )
            try:
                apply_delta(self.state, update.buckets)
            except SyncIntegrityError:
                self.version = None
                raise
            self.version = update.version

    def sync(self, fetch: Fetch) -> SyncReport:
        """Fetch what this receiver lacks and apply it; if a delta does not fit, fetch and apply a full copy."""
        updates = tuple(fetch(self.layout, self.version))
        try:
            self.apply(updates)
        except (VersionGap, SyncIntegrityError):
            self.version = None
            full = tuple(fetch(self.layout, None))
            self.apply(full)
            return SyncReport(
                self.version, updates_nbytes(updates) + updates_nbytes(full), len(updates) + len(full), True, True
            )
        return SyncReport(self.version, updates_nbytes(updates), len(updates), any(u.full for u in updates), False)


def _same_layout(old: Mapping[str, torch.Tensor], new: Mapping[str, torch.Tensor]) -> bool:
    return old.keys() == new.keys() and all(old[n].shape == new[n].shape and old[n].dtype == new[n].dtype for n in new)
