"""How a training minibatch is divided among FSDP ranks: a token-balanced partition of its distinct rows.

Every rank holds the whole (small) token batch, so advantages are computed on whole GRPO groups and the
loss normaliser of a minibatch (its assistant-token count, or its row count with ``seq_mean``) is the very
number one rank would use. What is split is the *work*: the forward and backward passes. The unit is a
class of identical rows (see ``PolicyTrainer._unique_rows``), so row dedup stays exact and keeps its
savings; a class's cost is the length of its one forward pass. Pure functions, no torch.distributed.
"""

from __future__ import annotations

from collections.abc import Sequence


def balanced_partition(costs: Sequence[int], parts: int) -> list[list[int]]:
    """Indices of ``costs`` dealt into ``parts`` lists whose cost sums are close (greedy longest-first).

    Deterministic: costs are taken longest first (ties by index) and each goes to the part with the least
    cost so far (ties by part number), so every rank computes the same partition on its own. Every index
    lands in exactly one part; each part lists its indices in increasing order. The largest part exceeds
    the mean by at most the largest single cost.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be non-negative")
    loads = [0] * parts
    result: list[list[int]] = [[] for _ in range(parts)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        part = min(range(parts), key=lambda p: (loads[p], p))
        result[part].append(index)
        loads[part] += costs[index]
    return [sorted(part) for part in result]


def part_costs(costs: Sequence[int], partition: Sequence[Sequence[int]]) -> list[int]:
    """The summed cost of each part (for statistics and tests)."""
    return [sum(costs[i] for i in part) for part in partition]
