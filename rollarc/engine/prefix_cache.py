"""Agentic prefix reuse: keep the KV of a finished turn under its ``cache_key`` for the next turn.

In a multi-turn agent the prompt of turn ``t+1`` is the prompt of turn ``t``, plus the tokens the model
generated, plus the environment's reply. When turn ``t`` finishes, the engine copies the KV of every
token it has computed into this cache under the request's ``cache_key`` (e.g. the trajectory id). Turn
``t+1`` with the same key takes the entry back, reuses the KV of the longest common token prefix and
prefills only the rest.

- Capacity is a token budget; the least recently stored entries are evicted first. An entry larger
  than the whole budget is not stored.
- An entry is removed when a request with its key is admitted; that request stores its own KV
  when it finishes.
- Entries hold KV computed under the weights of the version they were stored with, so
  ``LLMEngine.update_weights`` clears the cache: reusing them would mix old-weight KV into tokens that
  are recorded under the new version.

The bookkeeping is an ``OrderedDict`` used as an LRU because eviction is by total token count, which
``functools.lru_cache`` cannot express. Keys are exact (no sharing across keys, unlike a radix tree):
agent turns of one trajectory are the case this serves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class CachedPrefix:
    token_ids: list[int]
    kv: torch.Tensor  # [num_layers, 2, num_kv_heads, len(token_ids), head_dim]
    version: int

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._entries: OrderedDict[Hashable, CachedPrefix] = OrderedDict()
        self.num_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: Hashable, entry: CachedPrefix) -> bool:
        """Store ``entry`` under ``key`` (replacing any old one); False when it is larger than the budget."""
        self._drop(key)
        if entry.num_tokens == 0 or entry.num_tokens > self.capacity_tokens:
            return False
        while self.num_tokens + entry.num_tokens > self.capacity_tokens:
            _, evicted = self._entries.popitem(last=False)
            self.num_tokens -= evicted.num_tokens
        self._entries[key] = entry
        self.num_tokens += entry.num_tokens
        return True

    def lookup(self, key: Hashable, prompt_ids: Sequence[int], version: int) -> tuple[CachedPrefix, int] | None:
        """The entry of ``key`` and how many leading prompt tokens it holds KV for; None when nothing is reusable.

        At most ``len(prompt_ids) - 1`` tokens are reused, because the last prompt token must be run
        through the model to get the logits of the first new token. The entry stays in the cache
        until :meth:`discard` (the scheduler discards it when it admits the request).
        """
        entry = self._entries.get(key)
        if entry is None or entry.version != version:
            return None
        reusable = min(common_prefix_length(entry.token_ids, prompt_ids), len(prompt_ids) - 1)
        return (entry, reusable) if reusable > 0 else None

    def discard(self, key: Hashable) -> None:
        self._drop(key)

    def clear(self) -> None:
        self._entries.clear()
        self.num_tokens = 0

    def _drop(self, key: Hashable) -> CachedPrefix | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.num_tokens -= entry.num_tokens
        return entry
