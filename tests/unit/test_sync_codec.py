"""The delta codec: bit-exact round trips, the sparse/dense choice, checksums that catch wrong bases and damage."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollarc.sync.codec import (
    BaseMismatch,
    CorruptDelta,
    DeltaBucket,
    Stream,
    apply_delta,
    changed_positions,
    encode_delta,
    encode_full,
    full_nbytes,
    state_checksums,
)

INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, so that NaN payloads and -0.0 compare exactly."""
    return tensor.contiguous().view(INT_VIEW[tensor.element_size()])


def random_bits(shape: tuple[int, ...], dtype: torch.dtype, rng: np.random.Generator) -> torch.Tensor:
    size = torch.empty(0, dtype=dtype).element_size()
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    raw = rng.integers(0, 256, size=count * size, dtype=np.uint8)
    return torch.from_numpy(raw).view(dtype).reshape(shape).clone()


def mutate(tensor: torch.Tensor, fraction: float, rng: np.random.Generator) -> torch.Tensor:
    """A copy where about ``fraction`` of the elements get fresh random bits (NaNs, -0.0, anything)."""
    out = tensor.clone()
    flat = bits(out).reshape(-1)
    chosen = torch.from_numpy(np.flatnonzero(rng.random(flat.numel()) < fraction))
    fresh = bits(random_bits((flat.numel(),), tensor.dtype, rng))
    flat[chosen] = fresh[chosen]
    return out


def assert_bitwise_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert torch.equal(bits(got[name]), bits(want[name])), name


def clone_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in state.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(st.lists(st.integers(0, 40), min_size=0, max_size=3), min_size=1, max_size=4),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.uint8, torch.float64]),
    fraction=st.sampled_from([0.0, 0.001, 0.02, 0.3, 0.7, 1.0]),
    bucket_bytes=st.sampled_from([8, 40, 256, 4096, 1 << 20]),
    dense_threshold=st.sampled_from([0.05, 0.5, 1.0]),
    compress=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_decode_of_encode_is_bitwise_new(shapes, dtype, fraction, bucket_bytes, dense_threshold, compress, seed):
    rng = np.random.default_rng(seed)
    old = {f"t{i}": random_bits(tuple(shape), dtype, rng) for i, shape in enumerate(shapes)}
    new = {name: mutate(tensor, fraction, rng) for name, tensor in old.items()}
    buckets = list(
        encode_delta(old, new, bucket_bytes=bucket_bytes, dense_threshold=dense_threshold, compress=compress)
    )
    buckets = pickle.loads(pickle.dumps(buckets, protocol=5))  # as it would cross the Ray object store
    state = clone_state(old)
    apply_delta(state, buckets)
    assert_bitwise_equal(state, new)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    assert all(bucket.model_bytes <= max(bucket_bytes, 8 * itemsize) for bucket in buckets)
    assert sum(bucket.elements for bucket in buckets) == sum(max(t.numel(), 0) for t in new.values())
    assert sum(bucket.changed for bucket in buckets) == sum(int((bits(old[n]) != bits(new[n])).sum()) for n in new)


def test_negative_zero_and_nan_payloads_are_changes_and_restored_exactly():
    old = {"w": torch.tensor([0.0, 1.0, float("nan"), 2.0], dtype=torch.bfloat16)}
    new = {"w": old["w"].clone()}
    flat = bits(new["w"])
    flat[0] = torch.tensor(-0.0, dtype=torch.bfloat16).view(torch.int16)  # 0x8000: equal as floats
    flat[2] = 0x7FC1  # another NaN payload
    buckets = list(encode_delta(old, new, compress=False, dense_threshold=1.0))
    patch = buckets[0].patches[0]
    assert patch.count == 2
    state = clone_state(old)
    apply_delta(state, buckets)
    assert bits(state["w"]).tolist() == bits(new["w"]).tolist()
    assert bits(state["w"])[0].item() == -32768 and bits(state["w"])[2].item() == 0x7FC1


def test_sparse_patch_layout_is_gap_varints_and_msb_first_value_planes():
    old = {"w": torch.zeros(256, dtype=torch.bfloat16)}
    new = {"w": old["w"].clone()}
    new["w"][[2, 3, 200]] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)  # 0x3F80, 0xC000, 0x3F00
    (bucket,) = encode_delta(old, new, compress=False)
    (patch,) = bucket.patches
    assert patch.sparse and patch.count == 3
    # positions 2, 3, 200 -> gaps 2, 0, 196 -> varints 02 | 00 | c4 01
    assert patch.gaps.data.tolist() == [0x02, 0x00, 0xC4, 0x01]
    assert [s.data.tolist() for s in patch.values] == [[0x3F, 0xC0, 0x3F], [0x80, 0x00, 0x00]]
    assert not any(s.zipped for s in patch.values)


def test_dense_fallback_when_most_elements_change():
    rng = np.random.default_rng(0)
    old = {"w": random_bits((1000,), torch.bfloat16, rng)}
    new = {"w": mutate(old["w"], 0.9, rng)}
    (bucket,) = encode_delta(old, new, dense_threshold=0.5)
    (patch,) = bucket.patches
    assert not patch.sparse and patch.values[0].size == 2000
    assert patch.count == int((bits(old["w"]) != bits(new["w"])).sum())
    few = {"w": mutate(old["w"], 0.01, rng)}
    (bucket,) = encode_delta(old, few, dense_threshold=0.5)
    (patch,) = bucket.patches
    assert patch.sparse and patch.gaps.data.nbytes + sum(s.data.nbytes for s in patch.values) < 2000 / 20


def test_compression_kept_only_where_it_helps():
    rng = np.random.default_rng(0)
    skewed = np.zeros(20_000, np.uint8)
    skewed[rng.random(20_000) < 0.05] = 7
    stream = Stream.of(skewed, compress=True)
    assert stream.zipped and stream.data.nbytes < skewed.size / 3
    assert np.array_equal(stream.unpacked(), skewed)
    noise = rng.integers(0, 256, 20_000, dtype=np.uint8)
    stream = Stream.of(noise, compress=True)
    assert not stream.zipped and stream.data.nbytes == noise.size


def test_wrong_base_is_detected_and_the_bucket_left_untouched():
    rng = np.random.default_rng(1)
    v0 = {"a": random_bits((64,), torch.bfloat16, rng), "b": random_bits((64,), torch.bfloat16, rng)}
    v1 = {n: mutate(t, 0.1, rng) for n, t in v0.items()}
    v2 = {n: mutate(t, 0.1, rng) for n, t in v1.items()}
    delta_12 = list(encode_delta(v1, v2, bucket_bytes=1 << 20))
    state = clone_state(v0)  # the receiver is at v0, the delta is v1 -> v2
    with pytest.raises(BaseMismatch, match="base differs"):
        apply_delta(state, delta_12)
    assert_bitwise_equal(state, v0)


def test_wrong_base_in_one_tensor_only_still_undoes_the_whole_bucket():
    rng = np.random.default_rng(2)
    v0 = {"a": random_bits((64,), torch.float32, rng), "b": random_bits((64,), torch.float32, rng)}
    v1 = {n: mutate(t, 0.2, rng) for n, t in v0.items()}
    state = clone_state(v0)
    bits(state["b"])[5] ^= 1  # one flipped bit in the second tensor's base
    before = clone_state(state)
    with pytest.raises(BaseMismatch, match="'b'"):
        apply_delta(state, encode_delta(v0, v1, bucket_bytes=1 << 20))
    assert_bitwise_equal(state, before)


def test_damaged_values_fail_the_result_checksum_and_restore():
    rng = np.random.default_rng(3)
    old = {"w": random_bits((500,), torch.bfloat16, rng)}
    new = {"w": mutate(old["w"], 0.02, rng)}
    (bucket,) = encode_delta(old, new, compress=False)
    patch = bucket.patches[0]
    damaged_plane = patch.values[1].data.copy()
    damaged_plane[0] ^= 0x01
    damaged = dataclasses.replace(patch, values=(patch.values[0], Stream(damaged_plane, damaged_plane.size, False)))
    state = clone_state(old)
    with pytest.raises(CorruptDelta, match="checksum"):
        apply_delta(state, [DeltaBucket((damaged,))])
    assert_bitwise_equal(state, old)


def test_truncated_position_stream_is_corrupt_not_a_crash():
    rng = np.random.default_rng(4)
    old = {"w": random_bits((3000,), torch.bfloat16, rng)}
    new = {"w": mutate(old["w"], 0.01, rng)}
    (bucket,) = encode_delta(old, new, compress=False)
    patch = bucket.patches[0]
    cut = patch.gaps.data[:-1]
    with pytest.raises(CorruptDelta, match="position stream"):
        apply_delta(clone_state(old), [DeltaBucket((dataclasses.replace(patch, gaps=Stream(cut, cut.size, False)),))])


def test_full_copy_creates_missing_tensors_and_a_delta_needs_them():
    rng = np.random.default_rng(5)
    new = {"w": random_bits((3, 5), torch.bfloat16, rng), "empty": torch.empty(0, 4), "scalar": torch.tensor(2.5)}
    state: dict[str, torch.Tensor] = {}
    apply_delta(state, encode_full(new, bucket_bytes=8))
    assert_bitwise_equal(state, new)
    with pytest.raises(BaseMismatch, match="missing"):
        apply_delta({}, encode_delta(new, {n: mutate(t, 0.5, rng) for n, t in new.items()}))


def test_full_copy_into_a_wrong_shape_is_a_clear_error():
    with pytest.raises(ValueError, match=r"'w': receiver holds \(4,\)"):
        apply_delta({"w": torch.zeros(4)}, encode_full({"w": torch.zeros(5)}))


def test_bad_inputs_name_the_tensor():
    a = {"w": torch.zeros(4), "v": torch.zeros(2)}
    with pytest.raises(ValueError, match="only in old \\['v'\\]"):
        list(encode_delta(a, {"w": torch.zeros(4)}))
    with pytest.raises(ValueError, match="'w'"):
        list(encode_delta(a, {"w": torch.zeros(4, dtype=torch.bfloat16), "v": torch.zeros(2)}))
    with pytest.raises(ValueError, match="dense_threshold"):
        list(encode_delta(a, a, dense_threshold=0.0))


def test_changed_positions_matches_elementwise_scan_with_a_ragged_tail():
    rng = np.random.default_rng(6)
    for dtype, size in [(np.uint16, 4 * 1000 + 3), (np.uint32, 2 * 999 + 1), (np.uint8, 77)]:
        old = rng.integers(0, 4, size).astype(dtype)
        new = old.copy()
        new[rng.random(size) < 0.1] += 1
        assert np.array_equal(changed_positions(old, new), np.flatnonzero(old != new))


def test_wire_size_estimate_matches_pickle():
    rng = np.random.default_rng(7)
    old = {f"layer{i}.weight": random_bits((128, 64), torch.bfloat16, rng) for i in range(4)}
    new = {n: mutate(t, 0.02, rng) for n, t in old.items()}
    buckets = list(encode_delta(old, new, bucket_bytes=32 << 10))
    estimated = sum(b.nbytes for b in buckets)
    pickled = sum(len(pickle.dumps(b, protocol=5)) for b in buckets)
    assert abs(pickled - estimated) < 0.1 * estimated
    assert state_checksums(old) != state_checksums(new)


def test_full_nbytes_predicts_encode_full():
    rng = np.random.default_rng(8)
    state = {
        "a": random_bits((300, 7), torch.bfloat16, rng),
        "b": random_bits((5,), torch.float32, rng),
        "c": torch.empty(0),
    }
    for bucket_bytes in (16, 1000, 1 << 20):
        assert full_nbytes(state, bucket_bytes=bucket_bytes) == sum(
            b.nbytes for b in encode_full(state, bucket_bytes=bucket_bytes)
        )
