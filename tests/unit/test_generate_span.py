"""Dedicated and borrowed replicas write the same generate span, and the report counts borrowed lanes."""

from rollarc.engine.types import Completion
from rollarc.report.build import bubble_fractions
from rollarc.report.run_dir import Span
from rollarc.runtime.generate_span import generate_span


def _completion(finish_time: float) -> Completion:
    return Completion(
        request_id="r",
        prompt_len=12,
        token_ids=[5, 6, 7],
        logprobs=[-0.1, -0.2, -0.3],
        token_versions=[2, 2, 2],
        version=2,
        finish_reason="stop",
        cached_prompt_tokens=4,
        finish_time=finish_time,
    )


def test_a_borrowed_span_has_the_fields_of_a_dedicated_one_and_its_batch() -> None:
    common = {"t0": 1.0, "t1": 3.0, "wall_offset": 100.0, "cache_key": "traj-1", "task": "t", "step": 2}
    dedicated = generate_span(worker="rollout-0", role="rollout", pool="compute", completion=_completion(0.0), **common)
    borrowed = generate_span(
        worker="borrowed-0", role="borrowed", pool="borrowed", completion=_completion(2.5), batch=3, **common
    )
    assert dedicated == {
        "worker": "rollout-0",
        "role": "rollout",
        "kind": "generate",
        "t0": 101.0,
        "t1": 103.0,  # no engine finish time: when the caller got it
        "traj": "traj-1",
        "task": "t",
        "step": 2,
        "prompt_tokens": 12,
        "new_tokens": 3,
        "cached_tokens": 4,
        "pool": "compute",
    }
    assert set(borrowed) == set(dedicated) | {"batch"}
    assert (borrowed["worker"], borrowed["role"], borrowed["t1"], borrowed["batch"]) == (
        "borrowed-0",
        "borrowed",
        102.5,
        3,
    )


def test_bubble_fractions_have_a_borrowed_role() -> None:
    spans = [
        Span(kind="generate", t0=0.0, t1=10.0, worker="rollout-0", role="rollout"),
        Span(kind="generate", t0=0.0, t1=4.0, worker="borrowed-0", role="borrowed"),
        Span(kind="generate", t0=2.0, t1=6.0, worker="borrowed-0", role="borrowed"),  # overlaps: busy 0..6
        Span(kind="generate", t0=5.0, t1=10.0, worker="borrowed-1", role="borrowed"),
    ]
    # borrowed-0 idle 4/10, borrowed-1 idle 5/10: their mean
    assert bubble_fractions(spans) == {"borrowed": 0.45, "rollout": 0.0}
