"""When spot nodes vanish: a preemption schedule from a trace, or drawn at a rate, with a notice period.

A :class:`Preemption` says that spot node ``slot`` gets a notice at ``at_s`` seconds into the run and is
gone ``notice_s`` later (``notice_s = 0``: no notice, it just vanishes); a replacement node comes up in
the same slot ``replacement_s`` after the loss. A trace is a list of such rows (``configs/spot_trace.yaml``);
the rate-based schedule draws exponential gaps per slot with a seeded RNG, so the same config gives the
same schedule. The runtime that executes it is ``rollarc.diffusion.spot_fleet``.

Which node a preemption hits: ``slot`` (the trace's or the drawn slot, whatever it is doing) or ``busy``
(:func:`busy_slot`: the node whose worker is furthest into a leased job). A cloud reclaims VMs without
looking at them, but on a small fleet most nodes are idle between exploration rounds, so preemptions at
random times mostly hit idle workers and never exercise the in-flight commit or the lease expiry;
``busy`` makes every preemption cost work, the case the pull scheduler exists for.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Target = Literal["slot", "busy"]


@dataclass(frozen=True, order=True)
class Preemption:
    at_s: float
    slot: int
    notice_s: float

    def gone_s(self) -> float:
        return self.at_s + self.notice_s


def from_trace(rows: Sequence[Mapping[str, object]], slots: int) -> list[Preemption]:
    """Trace rows ``{at_s, slot, notice_s}`` checked and sorted by time; a bad row names itself."""
    out = []
    for i, row in enumerate(rows):
        unknown = set(row) - {"at_s", "slot", "notice_s"}
        if unknown or "at_s" not in row or "slot" not in row:
            raise ValueError(f"trace row {i} {dict(row)}: needs at_s and slot (and optional notice_s), nothing else")
        at_s, slot, notice = row["at_s"], row["slot"], row.get("notice_s", 0.0)
        if not isinstance(at_s, int | float) or not isinstance(slot, int) or not isinstance(notice, int | float):
            raise ValueError(f"trace row {i} {dict(row)}: at_s and notice_s are numbers, slot an integer")
        if not 0 <= slot < slots or at_s < 0 or notice < 0:
            raise ValueError(f"trace row {i} {dict(row)}: slot must be in [0, {slots}), at_s and notice_s >= 0")
        out.append(Preemption(float(at_s), slot, float(notice)))
    return sorted(out)


def at_rate(
    rate_per_hour: float, slots: int, horizon_s: float, notice_s: float, replacement_s: float, seed: int
) -> list[Preemption]:
    """Poisson preemptions of each slot's *live* node (``rate_per_hour`` per node) up to ``horizon_s``.

    A slot's next node only exists ``replacement_s`` after its loss, so gaps start from there.
    """
    if rate_per_hour <= 0:
        return []
    rng = random.Random(seed)
    out = []
    for slot in range(slots):
        t = 0.0
        while True:
            t += rng.expovariate(rate_per_hour / 3600.0)
            if t >= horizon_s:
                break
            out.append(Preemption(t, slot, notice_s))
            t += notice_s + replacement_s
    return sorted(out)


def busy_slot(held: Mapping[int, tuple[str, int]], slot_of: Mapping[str, int], min_step: int = 1) -> int | None:
    """The slot whose worker is furthest into a leased job (at least ``min_step`` steps done), ties to the lowest
    slot; ``None`` when no live worker is that far into a job.

    ``held`` is the queue's leased jobs, ``job_id -> (worker, steps done)``; ``slot_of`` maps each live
    worker to its slot (a worker that is gone no longer counts).
    """
    best: tuple[int, int] | None = None  # (-steps, slot): the most steps first, then the lowest slot
    for worker, step in held.values():
        if worker in slot_of and step >= min_step:
            key = (-step, slot_of[worker])
            best = key if best is None or key < best else best
    return None if best is None else best[1]


Hit = Literal["member", "node"]


def what_is_hit(notice_s: float, members: int) -> Hit:
    """What a preemption of a slot whose worker runs an SP group of ``members`` devices takes.

    With a notice and more than one member, one member (a device of the group): the survivors regroup at
    the largest degree they allow, keeping their weights, and the job goes on without a commit. Without a
    notice (nothing can regroup in time), or of a last member, the whole node: the in-flight commit or the
    lease expiry recovers its job, as without SP.
    """
    return "member" if notice_s > 0 and members > 1 else "node"
