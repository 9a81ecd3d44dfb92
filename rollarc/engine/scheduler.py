"""Continuous batching: which requests run this step, and in which KV slot.

The scheduler decides and the model runner executes; they meet through :class:`SchedulerOutput`.

- Waiting requests are admitted first-in first-out between decode steps, while a KV slot is free
  and the step's prefill token budget lasts. The first admission of a step may exceed the budget,
  so a prompt longer than the budget is not starved.
- On admission a request with a ``cache_key`` takes its reusable prefix from the prefix cache;
  only the rest of its prompt counts against the budget.
- Running requests occupy slots ``0..B-1`` in ``running`` order. When one leaves, the last one moves
  into its slot (``SlotKVCache.move``), so the slots stay compact.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rollarc.engine.kv_cache import SlotKVCache
from rollarc.engine.prefix_cache import PrefixCache
from rollarc.engine.request import Request


@dataclass
class SchedulerOutput:
    decodes: list[Request] = field(default_factory=list)  # in slot order 0..B-1
    prefills: list[Request] = field(default_factory=list)  # newly admitted, slots B..B+R-1


class Scheduler:
    def __init__(self, kv: SlotKVCache, prefix_cache: PrefixCache, prefill_token_budget: int) -> None:
        self.kv = kv
        self.prefix_cache = prefix_cache
        self.prefill_token_budget = prefill_token_budget
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def schedule(self, version: int) -> SchedulerOutput:
        """Admit what fits, then return this step's work: decode every running request, prefill the admitted."""
        output = SchedulerOutput(decodes=list(self.running))
        budget = self.prefill_token_budget
        while self.waiting and len(self.running) < self.kv.max_num_seqs:
            request = self.waiting[0]
            reuse = (
                self.prefix_cache.lookup(request.cache_key, request.prompt_ids, version)
                if request.cache_key is not None
                else None
            )
            cached = reuse[1] if reuse is not None else 0
            need = len(request.prompt_ids) - cached
            if output.prefills and need > budget:
                break
            self.waiting.popleft()
            budget -= need
            if request.cache_key is not None:
                self.prefix_cache.discard(request.cache_key)
            request.reused_prefix = reuse[0] if reuse is not None else None
            request.cached_prompt_tokens = cached
            request.slot = len(self.running)
            self.running.append(request)
            output.prefills.append(request)
        return output

    def remove_waiting(self, request: Request) -> None:
        self.waiting.remove(request)

    def release(self, request: Request) -> None:
        """Take a running request out of the batch and keep the slots compact."""
        slot = request.slot
        assert slot is not None and self.running[slot] is request
        last = self.running.pop()
        if last is not request:
            assert last.slot is not None  # every running request holds a slot
            self.running[slot] = last
            self.kv.move(src=last.slot, dst=slot, length=last.num_computed)
            last.slot = slot
        request.slot = None
