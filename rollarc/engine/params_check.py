"""What one request's sampling parameters must satisfy before the engine admits it.

``SamplingParams`` checks ranges a caller may get wrong; this checks what would otherwise fail only inside a
decode step, where an exception belongs to the whole batch: a ``top_k`` that does not fit the int64 tensor the
sampler builds, a ``seed`` that ``torch.Generator.manual_seed`` refuses, a stop string that is not a string.
Refused at ``add_request``, such a request fails alone with a ``ValueError`` naming the field.
"""

from __future__ import annotations

from rollarc.engine.types import SamplingParams

INT64_MAX = 2**63 - 1
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def params_problem(params: SamplingParams) -> str | None:
    """The first field of ``params`` the engine cannot run, as a message naming it; None when all are fine."""
    if not _is_int(params.top_k) or not 0 <= params.top_k <= INT64_MAX:
        return f"SamplingParams.top_k must be an integer in [0, {INT64_MAX}] (0 = off), got {params.top_k!r}"
    if params.seed is not None and (not _is_int(params.seed) or not SEED_RANGE[0] <= params.seed <= SEED_RANGE[1]):
        return (
            f"SamplingParams.seed must be None or an integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {params.seed!r}"
        )
    if not _is_int(params.max_tokens):
        return f"SamplingParams.max_tokens must be an integer, got {params.max_tokens!r}"
    bad = [s for s in params.stop if not isinstance(s, str)]
    if bad:
        return f"SamplingParams.stop must hold strings only, got {bad[:3]!r}"
    return None
