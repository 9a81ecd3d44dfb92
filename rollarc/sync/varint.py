"""Vectorised LEB128 ("varint") packing of non-negative integers, used for the gaps between changed positions.

Why hand-written: numpy has no varint codec, and the Python-level packers on PyPI loop per value,
which is orders of magnitude too slow for millions of positions per bucket. Here every step is a
numpy pass over all values (or over the few values that need another byte).

Each value takes 7 bits per byte, low bits first; the top bit of a byte is set when more bytes of
the same value follow. Gaps below 128 (the common case for a sparse bf16 delta) take one byte.
"""

from __future__ import annotations

import numpy as np

_MAX_BYTES = 10  # ceil(64 / 7)


class VarintError(ValueError):
    """A byte stream that is not a well-formed sequence of varints."""


def pack(values: np.ndarray) -> np.ndarray:
    """Pack non-negative integers into a uint8 varint stream."""
    values = np.asarray(values).ravel()
    if values.size == 0:
        return np.empty(0, np.uint8)
    if values.dtype.kind not in "iu":
        raise ValueError(f"varint.pack takes integers, got {values.dtype}")
    if values.dtype.kind == "i" and values.min() < 0:
        raise ValueError("varint.pack takes non-negative integers only")
    top = int(values.max())
    if top < 0x80:
        return values.astype(np.uint8)
    values = values.astype(np.uint32 if top < 1 << 32 else np.uint64, copy=False)
    width = (top.bit_length() + 6) // 7
    # Row i holds value i's bytes; masking out the unused ones leaves them in stream order.
    grid = np.empty((values.size, width), np.uint8)
    used = np.empty((values.size, width), bool)
    for k in range(width):
        shifted = values >> (7 * k) if k else values
        grid[:, k] = (shifted & 0x7F).astype(np.uint8) | ((shifted >= 0x80).astype(np.uint8) << 7)
        used[:, k] = shifted > 0 if k else True
    stream: np.ndarray = grid[used]  # numpy 2.3's stubs (vLLM's pin) type a boolean index as Any
    return stream


def unpack(stream: np.ndarray, count: int) -> np.ndarray:
    """Unpack exactly ``count`` varints (as uint64) from ``stream``; raise VarintError if it does not hold that."""
    stream = np.asarray(stream, dtype=np.uint8).ravel()
    if count == 0:
        if stream.size:
            raise VarintError(f"expected 0 varints, got {stream.size} stray bytes")
        return np.empty(0, np.uint64)
    if stream.size == count and int(stream.max()) < 0x80:
        return stream.astype(np.uint64)
    ends = np.flatnonzero(stream < 0x80)
    if ends.size == 0 or ends[-1] != stream.size - 1:
        raise VarintError(f"stream of {stream.size} bytes ends inside a varint (truncated)")
    if ends.size != count:
        raise VarintError(f"expected {count} varints, the stream holds {ends.size}")
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    width = int(lengths.max())
    if width > _MAX_BYTES:
        raise VarintError(f"a varint of {width} bytes overflows 64 bits")
    values = (stream[starts] & 0x7F).astype(np.uint64)
    for k in range(1, width):
        idx = np.flatnonzero(lengths > k)
        values[idx] |= (stream[starts[idx] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return values
