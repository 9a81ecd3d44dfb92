"""Vectorised varint packing: hand-checked bytes, round trips, and malformed streams rejected."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.sync.varint import VarintError, pack, unpack


def test_known_encodings():
    values = np.array([0, 1, 127, 128, 300, 16384], dtype=np.uint64)
    assert pack(values).tolist() == [0x00, 0x01, 0x7F, 0x80, 0x01, 0xAC, 0x02, 0x80, 0x80, 0x01]
    assert pack(np.array([2**64 - 1], dtype=np.uint64)).tolist() == [0xFF] * 9 + [0x01]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)), max_size=200))
def test_round_trip(values):
    array = np.array(values, dtype=np.uint64)
    assert np.array_equal(unpack(pack(array), len(values)), array)


def test_signed_input_must_be_non_negative():
    with pytest.raises(ValueError, match="non-negative"):
        pack(np.array([3, -1]))


@pytest.mark.parametrize(
    "stream, count, message",
    [
        ([0x80], 1, "truncated"),
        ([0x01, 0x02], 1, "expected 1 varints, the stream holds 2"),
        ([0x05], 0, "stray"),
        ([0x80] * 10 + [0x01], 1, "overflows"),
    ],
)
def test_malformed_streams(stream, count, message):
    with pytest.raises(VarintError, match=message):
        unpack(np.array(stream, dtype=np.uint8), count)
