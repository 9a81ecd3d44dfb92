"""GCPauses counts every collection by generation, with its pause, and stops counting once removed."""

from __future__ import annotations

import gc

from rollarc.runtime.gc_pauses import GCPauses


def test_each_collection_is_counted_in_its_generation_and_removal_stops_counting() -> None:
    pauses = GCPauses()
    try:
        before = pauses.counters()
        gc.collect(2)
        gc.collect(0)
        after = pauses.counters()
        assert after["gc_collections_gen2"] == before["gc_collections_gen2"] + 1
        assert after["gc_collections_gen0"] >= before["gc_collections_gen0"] + 1  # and any the interpreter ran
        assert pauses.max_ms >= 0.0 and all(ms >= 0.0 for ms in pauses.ms)
    finally:
        pauses.remove()
    gc.collect(2)
    assert pauses.counters()["gc_collections_gen2"] == after["gc_collections_gen2"]
