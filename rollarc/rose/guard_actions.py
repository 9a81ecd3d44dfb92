"""The guard's decisions by cause (summary.json's ``harvest_guard_actions``, ``rollarc bench rose``'s ``guard_actions``).

A co-serving executor holds rollout back for three reasons, and only one of them is the SLO guard's: the guard
refused the step (an **SLO pause**) or admitted only part of the running batch (an **SLO preemption**, of the rest),
or the lending policy took the replica back once it reported no headroom (a **withdrawal**). Apart from those,
serving's KV reservation left no room (a **memory pause**; running turns that no longer fit are **memory
preemptions**) or the rollout engine had no free sequence slot (a **slot pause**); those are counted before the guard
is asked. Each pause is counted once, by its cause; one whose cause changes is counted again under the new one.
"""

from __future__ import annotations

from collections.abc import Mapping

GUARD_ACTIONS = ("slo_pauses", "slo_preemptions", "withdrawals", "memory_pauses", "slot_pauses", "memory_preemptions")
# the executor's counter behind each key (withdrawals are the lending policy's decisions, not an executor counter)
COUNTERS = {
    "slo_pauses": "paused_for_slo",
    "slo_preemptions": "preempted_for_slo",
    "memory_pauses": "paused_for_memory",
    "slot_pauses": "paused_for_slots",
    "memory_preemptions": "preempted_for_memory",
}


def guard_actions(counters: Mapping[str, int], withdrawals: int) -> dict[str, int]:
    """The six causes, from executor counters (one replica's, or summed) and the withdrawals decided."""
    actions = {key: int(counters.get(counter, 0)) for key, counter in COUNTERS.items()}
    return {key: withdrawals if key == "withdrawals" else actions[key] for key in GUARD_ACTIONS}
