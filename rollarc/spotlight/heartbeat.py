"""A pull worker's heartbeats, pipelined: the denoising loop never waits for the queue's answer.

A heartbeat renews the lease and brings back the queue's word (keep going, commit now, or the lease is
gone). Waiting for that answer at every heartbeat cost a pull worker a round trip to the queue actor each
time, tens of milliseconds on a busy 2-core machine against a denoising step of about 22 ms, which made
pull slower than push with no preemption at all (docs/spot.md#rollarc-bench-spot). So the worker sends a
heartbeat and reads its answer at the next heartbeat point instead, by which time it is back:

- at most one heartbeat is in flight; while its answer is not back, no new one is sent (the lease was
  renewed when the queue received it, so nothing is lost by not piling more behind it);
- a NOTICE or LOST is acted on up to one heartbeat interval later than a blocking heartbeat would: a
  few denoising steps, to be kept far inside ``spot.notice_s`` and ``spot.lease_s``.

Pure: the transport is passed in (``send`` posts a heartbeat and returns its handle, ``answer`` returns
the handle's Beat once it is back, else None), so the rule is tested without Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollarc.spotlight.job_queue import Beat


def pipelined_beat(
    pending: Any | None, send: Callable[[], Any], answer: Callable[[Any], Beat | None]
) -> tuple[Beat, Any | None]:
    """One heartbeat point: (the word to act on now, the heartbeat left in flight).

    The word is the answer to the heartbeat in flight if it is back, else OK; a new heartbeat is sent
    when none is in flight any more and the answer (if any) said to keep going.
    """
    if pending is not None:
        beat = answer(pending)
        if beat is None:
            return Beat.OK, pending
        if beat is not Beat.OK:
            return beat, None
    return Beat.OK, send()
