"""The ``sync:`` section of the training config: how new weights reach rollout workers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollarc.configio import FrozenModel


class SyncConfig(FrozenModel):
    """Weight-sync settings; the runtime's WeightSync reads them, the codec and relay take them as arguments.

    - ``method``: ``full`` sends every weight each version; ``delta`` sends the lossless sparse
      change (changed positions + new values), falling back to dense per tensor range.
    - ``bucket_mb``: model bytes encoded per bucket; bounds the encoder's and decoder's peak memory.
    - ``dense_threshold``: changed fraction above which a tensor range is sent dense.
    - ``history``: deltas the publisher keeps, so a receiver that missed versions can get a chain.
    - ``dtype``: the dtype floating-point weights are sent in (None: as the trainer holds them).
      Rollout engines then run the weights rounded to it, as with bf16 inference weights; it is
      what makes deltas sparse, since fp32 weights change almost everywhere at every step.
    - ``compress``: entropy-code (zlib, Huffman only) the gap stream and the value byte planes,
      each stream only when that makes it at least 5% smaller.
    - ``topology`` / ``fanout``: how a site fans a copy out (``direct`` = every receiver is sent its own).
    """

    method: Literal["full", "delta"] = "full"
    bucket_mb: float = Field(64.0, ge=1e-3, le=1 << 16)
    dense_threshold: float = Field(0.5, gt=0.0, le=1.0)
    history: int = Field(4, ge=0, le=1024)
    dtype: Literal["bfloat16", "float16", "float32"] | None = None
    compress: bool = True
    topology: Literal["direct", "tree", "ring"] = "tree"
    fanout: int = Field(2, ge=1, le=64)

    @property
    def bucket_bytes(self) -> int:
        return max(1, int(self.bucket_mb * (1 << 20)))
