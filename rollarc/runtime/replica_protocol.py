"""The rollout replica interface: every method the router, the workers and the harvest pool call on a replica.

Callers hold Ray handles (``handle.generate.remote(...)``), so this describes the actor classes as written. The
four replicas (``RolloutWorker``, ``CoServingReplica``, ``VLLMRolloutWorker``, ``OpenAIReplica``) implement it;
mypy checks each one (the assignments under ``TYPE_CHECKING`` below) and
``tests/integration/test_rollout_replica_contract.py`` runs one contract suite over them.

The one type parameter is what a weight update carries: object-store buckets (:class:`SyncPayload`) for the
engines rollarc runs, and a written checkpoint (``CheckpointHandOff.write``'s record: path, version, bytes) for an
external OpenAI server, which can only load weights from a path. Everything else has one signature.
Methods that may wait on an engine (``abort_*``, ``ping``) are coroutines in every replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rollarc.engine.types import Completion, SamplingParams
from rollarc.runtime.router import TurnArgs
from rollarc.runtime.turn_chunks import TurnChunk

Update = TypeVar("Update", contravariant=True)
CheckpointWritten = dict[str, Any]  # CheckpointHandOff.write's record: path, version, write_s, bytes

STATS_KEYS = frozenset({"name", "running", "generated_tokens", "prompt_tokens"})  # every replica's stats() has these


@dataclass(frozen=True)
class CatchUp:
    """What ``catch_up`` did: the version now held, the bytes fetched for it, and whether a full copy was needed."""

    version: int
    bytes: int = 0
    full_copy: bool = False


class RolloutReplica(Protocol[Update]):
    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cache_key: str | None = None,
        task: str | None = None,
        step: int | None = None,
    ) -> Completion:
        """One turn; an aborted turn returns ``finish_reason="abort"`` with its partial output."""
        ...

    def generate_batch(self, turns: list[TurnArgs]) -> AsyncIterator[TurnChunk]:
        """Many turns, streamed back in chunks as they finish (a Ray streaming generator, ``turn_chunks``)."""
        ...

    async def update_weights(self, payload: Update) -> dict[str, float]:
        """Apply a published version, honouring ``async.in_flight_update`` (``policy/in_flight.py``); timings."""
        ...

    async def catch_up(self) -> CatchUp:
        """Fetch what this replica lacks (a full copy when it holds no version) and swap it in."""
        ...

    async def abort_key(self, cache_key: str) -> int:
        """Abort the turns of one trajectory (they return their partial output); how many."""
        ...

    async def abort_all(self) -> int:
        """Abort every running turn (a drain's end, a withdrawal); how many."""
        ...

    def weights_sha256(self) -> str | None:
        """``serve.weights.state_digest`` of the weights the engine generates with (None: not known yet)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters; at least :data:`STATS_KEYS`."""
        ...

    def drain_spans(self) -> list[dict[str, Any]]:
        """The timeline spans (generate, sync) since the last call."""
        ...

    async def ping(self) -> str:
        """The replica's name; raises ``EngineDeadError`` when its engine died and the actor lives on."""
        ...

    def shutdown(self) -> None:
        """Stop what the actor started outside itself (vLLM's engine core) before it is killed."""
        ...


if TYPE_CHECKING:  # static conformance: mypy fails here when a replica's method drifts from the protocol
    from rollarc.runtime.coserving_replica import CoServingReplica
    from rollarc.runtime.openai_replica import OpenAIReplica
    from rollarc.runtime.rollout_worker import RolloutWorker
    from rollarc.runtime.vllm_replica import VLLMRolloutWorker
    from rollarc.runtime.weight_sync import SyncPayload

    _builtin: type[RolloutReplica[SyncPayload]] = RolloutWorker
    _coserving: type[RolloutReplica[SyncPayload]] = CoServingReplica
    _vllm: type[RolloutReplica[SyncPayload]] = VLLMRolloutWorker
    _openai: type[RolloutReplica[CheckpointWritten]] = OpenAIReplica
