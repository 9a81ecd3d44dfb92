"""ReplicaLog: the token counters and timeline spans every rollout replica keeps (``runtime/replica_log.py``)."""

from __future__ import annotations

from rollarc.engine.types import Completion
from rollarc.runtime.replica_log import ReplicaLog


def completion(prompt_len: int, tokens: int, finish_reason: str = "length") -> Completion:
    return Completion(
        request_id="r",
        prompt_len=prompt_len,
        token_ids=list(range(tokens)),
        logprobs=[-1.0] * tokens,
        token_versions=[3] * tokens,
        version=3,
        finish_reason=finish_reason,  # type: ignore[arg-type]
    )


def test_turns_and_syncs_are_counted_and_drained_once() -> None:
    log = ReplicaLog("borrowed-0", "borrowed", role="borrowed")
    offset = log.wall_offset
    log.turn(completion(5, 8), 1.0, 2.0, "traj-a", "t", 4, batch=2)
    log.turn(completion(7, 3, "abort"), 2.0, 2.5, "traj-b", None, None)
    log.sync(3.0, 3.25, 4)
    assert (log.generated_tokens, log.prompt_tokens) == (11, 12)
    generate_a, generate_b, sync = log.drain()
    assert generate_a == {
        "worker": "borrowed-0",
        "role": "borrowed",
        "kind": "generate",
        "t0": 1.0 + offset,
        "t1": 2.0 + offset,
        "traj": "traj-a",
        "task": "t",
        "step": 4,
        "prompt_tokens": 5,
        "new_tokens": 8,
        "cached_tokens": 0,
        "pool": "borrowed",
        "batch": 2,
    }
    assert (generate_b["traj"], generate_b["new_tokens"], "batch" in generate_b) == ("traj-b", 3, False)
    assert sync == {
        "worker": "borrowed-0",
        "role": "rollout",
        "kind": "sync",
        "t0": 3.0 + offset,
        "t1": 3.25 + offset,
        "version": 4,
        "pool": "borrowed",
    }
    assert log.drain() == []
    assert (log.generated_tokens, log.prompt_tokens) == (11, 12)  # counters are totals, not drained
