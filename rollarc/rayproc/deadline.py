"""Every wait on an actor has a deadline: a hung (alive, not answering) actor stops the run with one line.

A dead actor raises at once (``RayActorError``), but one that is alive and stuck (a deadlock, a stopped
process, a wedged collective) would keep a bare ``ray.get`` waiting forever. :func:`get_within` waits at
most ``timeout_s`` and turns Ray's ``GetTimeoutError`` into :class:`ActorHung`, whose message names the
actor, the call and the config key to raise if the actor is only slow. :class:`Deadlines` holds the three
deadlines of the ``cluster:`` section (docs/failures.md#every-wait-on-an-actor-has-a-deadline).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import ray
from ray.exceptions import GetTimeoutError, RayTaskError

from rollarc.config.cluster import CallDeadlines


class ActorHung(RuntimeError):
    """An actor did not answer a call within its deadline; the run stops (its summary says which call)."""


def hung(actor: str, method: str, timeout_s: float, key: str) -> ActorHung:
    return ActorHung(
        f"{actor} did not answer {method} within {timeout_s:g} s: it is alive but hung "
        f"(if it is only slow, raise {key})"
    )


def get_within(refs: Any, timeout_s: float, actor: str, method: str, key: str) -> Any:
    """``ray.get(refs)`` waiting at most ``timeout_s``; a dead actor still raises its own error.

    An actor that itself found a hung peer (FSDP rank 0 waiting on a rank) raised ``ActorHung`` remotely: it
    comes back as its one line, not wrapped in the remote traceback."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise hung(actor, method, timeout_s, key) from None
    except RayTaskError as err:
        if isinstance(err.cause, ActorHung):
            raise ActorHung(*err.cause.args) from None
        raise


Kind = Literal["start", "call", "train"]


@dataclass(frozen=True)
class Deadlines:
    """The ``cluster:`` deadlines by kind of call: an actor's start, a control call, a long training call."""

    start_s: float
    call_s: float
    train_s: float
    section: str = "cluster"

    @classmethod
    def of(cls, cluster: CallDeadlines) -> Deadlines:
        return cls(cluster.start_timeout_s, cluster.call_timeout_s, cluster.train_timeout_s)

    def seconds(self, kind: Kind) -> float:
        return {"start": self.start_s, "call": self.call_s, "train": self.train_s}[kind]

    def key(self, kind: Kind) -> str:
        return f"{self.section}.{kind}_timeout_s"

    def get(self, kind: Kind, refs: Any, actor: str, method: str) -> Any:
        """``ray.get(refs)`` within the ``kind`` deadline, naming ``actor`` and ``method`` if it passes."""
        return get_within(refs, self.seconds(kind), actor, method, self.key(kind))

    def get_each(self, kind: Kind, refs_by_actor: dict[str, Any], method: str) -> list[Any]:
        """One call to each of several actors: the error names every actor that did not answer."""
        refs = list(refs_by_actor.values())
        if not refs:
            return []
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.seconds(kind))
        if waiting:
            late = [actor for actor, ref in refs_by_actor.items() if ref in waiting]
            raise hung(", ".join(late), method, self.seconds(kind), self.key(kind))
        return list(ray.get(refs, timeout=self.seconds(kind)))

    def check(self, kind: Kind, started: float, actor: str, method: str, now: float | None = None) -> None:
        """A call polled with ``ray.wait``: raise once it has run longer than its deadline."""
        if (time.time() if now is None else now) - started > self.seconds(kind):
            raise hung(actor, method, self.seconds(kind), self.key(kind))
