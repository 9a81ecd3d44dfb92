"""PrefixCache (LRU by token budget, longest-common-prefix lookup) and SlotKVCache slot moves."""

from __future__ import annotations

import torch

from rollarc.engine.kv_cache import SlotKVCache
from rollarc.engine.prefix_cache import CachedPrefix, PrefixCache, common_prefix_length


def _entry(tokens: list[int], version: int = 0) -> CachedPrefix:
    return CachedPrefix(tokens, torch.zeros(1, 2, 1, len(tokens), 2), version)


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0


def test_lookup_reuses_the_common_prefix_but_never_the_last_prompt_token() -> None:
    cache = PrefixCache(100)
    cache.put("t", _entry([1, 2, 3, 4, 5]))
    assert cache.lookup("t", [1, 2, 3, 4, 5, 6, 7], version=0)[1] == 5
    assert cache.lookup("t", [1, 2, 9], version=0)[1] == 2
    assert cache.lookup("t", [1, 2, 3], version=0)[1] == 2  # the last prompt token is always recomputed
    assert cache.lookup("t", [7, 8], version=0) is None
    assert cache.lookup("t", [1, 2, 3, 4, 5, 6], version=1) is None  # other weights
    assert cache.lookup("other", [1, 2, 3], version=0) is None


def test_lru_eviction_by_token_budget() -> None:
    cache = PrefixCache(10)
    cache.put("a", _entry([1] * 4))
    cache.put("b", _entry([2] * 4))
    cache.put("a", _entry([1] * 3))  # replacing refreshes "a" and frees its old tokens
    assert cache.num_tokens == 7
    cache.put("c", _entry([3] * 5))  # needs 2 more tokens: evicts "b", the least recently stored
    assert cache.lookup("b", [2, 2], 0) is None and cache.lookup("a", [1, 1], 0) is not None
    assert cache.num_tokens == 8 and len(cache) == 2
    assert not cache.put("huge", _entry([4] * 11))  # larger than the whole budget: not stored
    cache.discard("a")
    assert cache.num_tokens == 5
    cache.clear()
    assert cache.num_tokens == 0 and len(cache) == 0


def test_slot_move_read_write_and_clear() -> None:
    kv = SlotKVCache(num_layers=2, max_num_seqs=3, num_kv_heads=1, max_model_len=4, head_dim=2)
    kv.data[:, :, 2] = torch.arange(2 * 2 * 4 * 2, dtype=torch.float32).view(2, 2, 1, 4, 2)
    kv.move(src=2, dst=0, length=3)
    assert torch.equal(kv.data[:, :, 0, :, :3], kv.data[:, :, 2, :, :3])
    assert kv.data[:, :, 0, :, 3].abs().sum() == 0  # only `length` positions move
    saved = kv.read(0, 3)
    kv.clear(0, 3)
    assert kv.data[:, :, 0].abs().sum() == 0
    kv.write(1, saved, 3)
    assert torch.equal(kv.data[:, :, 1, :, :3], kv.data[:, :, 2, :, :3])
    assert kv.nbytes == 2 * 2 * 3 * 1 * 4 * 2 * 4
