"""The ``sync:`` section of the training config: how new weights reach rollout workers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rollarc.config.io import FrozenModel


class SyncConfig(FrozenModel):
    """Weight-sync settings; the runtime's WeightSync reads them, the codec and publisher take them as arguments."""

    method: Literal["full", "delta"] = Field(
        "full",
        description="`full` sends every weight each version; `delta` "
        "sends the lossless sparse change (changed "
        "positions + new values), dense per tensor range "
        "where that is smaller",
    )
    bucket_mb: float = Field(
        64.0,
        ge=1e-3,
        le=1 << 16,
        description="model bytes encoded per bucket; bounds the encoder's and decoder's peak memory",
    )
    dense_threshold: float = Field(
        0.5, gt=0.0, le=1.0, description="changed fraction above which a tensor range is sent dense"
    )
    history: int = Field(
        4, ge=0, le=1024, description="deltas the publisher keeps, so a receiver that missed versions can get a chain"
    )
    dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        None,
        description="dtype floating-point weights are sent in (null: as the trainer holds them); rollout "
        "engines then run the rounded weights, as with bf16 inference weights. It is what makes "
        "deltas sparse: fp32 weights change almost everywhere at every step",
    )
    compress: bool = Field(
        True,
        description="entropy-code (zlib, Huffman only) the gap stream and the value byte "
        "planes, each stream only when that makes it at least 5% smaller",
    )

    @property
    def bucket_bytes(self) -> int:
        return max(1, int(self.bucket_mb * (1 << 20)))
