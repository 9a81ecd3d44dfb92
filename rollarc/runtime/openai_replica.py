"""The ``openai`` rollout backend: one router replica per OpenAI-compatible completions server.

An :class:`OpenAIReplica` actor implements :class:`~rollarc.runtime.replica_protocol.RolloutReplica` (its weight
updates are written checkpoints, not object-store buckets), so the router, the agent loop and the controller
treat it like a built-in engine replica. ``generate`` posts one streamed ``/v1/completions`` request
(token ids in; token ids, log-probs and the server's version out, chunk by chunk as the server decodes them,
see :mod:`rollarc.serve.stream`).

Versions stay exact whatever the server: a server need not report per-token versions (vLLM's does not), so the
in-flight plan (``rollarc.policy.in_flight``) holds new turns and either lets running turns finish
(``async.in_flight_update: finish``) or aborts them (``abort``: the stream is closed, the server aborts the
request, and the turn ends ``"abort"`` with the tokens received so far, which the agent loop resumes from, as
with the in-process engines), then calls the reload endpoint, and only then admits turns again. So every
turn is generated under one version, the one the server reports (``rollarc_version``) or, for a server
that reports none, the one the adapter last loaded.

Failures never hang a run: every request has a timeout for the turn (``timeout_s``) and one for each silence of
its stream (``chunk_timeout_s``); an unreachable server, a timeout, an HTTP error or a reply without token
ids/log-probs ends the turn with ``finish_reason="error"`` and a message naming the
server, which fails that trajectory (counted, and the run stops when every group fails). A failed reload
fails the weight sync, which stops the run with that message (at start-up: a ConfigError naming
``rollout.openai.base_urls``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import ray
from ray.exceptions import RayTaskError

from rollarc.config.io import ConfigError
from rollarc.engine.types import Completion, SamplingParams
from rollarc.policy.in_flight import plan_for_backend
from rollarc.runtime.replica_log import ReplicaLog
from rollarc.runtime.replica_protocol import CatchUp, CheckpointWritten
from rollarc.runtime.router import REGISTERING, TurnArgs
from rollarc.runtime.sync_report import sync_timings
from rollarc.runtime.turn_chunks import TurnChunk, chunks_as_completed
from rollarc.runtime.weight_handoff import CheckpointHandOff
from rollarc.serve.access import bearer_headers
from rollarc.serve.config import OpenAIBackendConfig
from rollarc.serve.protocol import completion_request
from rollarc.serve.stream import SSEDecoder, StreamAccumulator


class ReloadError(RuntimeError):
    """A server did not load the new weights; serving on would mislabel versions."""


@ray.remote
class OpenAIReplica:
    def __init__(
        self, name: str, base_url: str, cfg: OpenAIBackendConfig, in_flight_update: str, pool: str, version: int
    ):
        self.name = name
        self.base_url = base_url
        self.cfg = cfg
        self.pool = pool
        self.update_plan = plan_for_backend(in_flight_update, "openai")
        self.version = version
        self._session: aiohttp.ClientSession | None = None
        self._running: dict[str, tuple[asyncio.Future, str | None]] = {}
        self._aborted: set[str] = set()
        self._gate = asyncio.Event()
        self._gate.set()
        self._slots = asyncio.Semaphore(cfg.max_concurrent_requests)
        self.log = ReplicaLog(name, pool)
        self.errors = 0
        self.reloads: list[dict[str, Any]] = []

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.cfg.max_concurrent_requests),
                headers=bearer_headers(self.cfg.api_key_env),  # a server started with --api-key wants it
            )
        return self._session

    async def _post(self, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        url = self.base_url + path
        async with self._client().post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            await _raise_for_status(response, url)
            return await response.json(content_type=None)

    async def _stream(self, body: dict[str, Any], turn: StreamAccumulator) -> None:
        """Post a streamed completion and fold its chunks into ``turn`` as they arrive, until ``data: [DONE]``.

        Cancelling it (an abort) closes the connection, which makes the server abort the request; ``turn`` keeps
        the tokens received."""
        url = self.base_url + "/v1/completions"
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s, sock_read=self.cfg.chunk_timeout_s)
        async with self._client().post(url, json=body, timeout=timeout) as response:
            await _raise_for_status(response, url)
            events = SSEDecoder()
            async for raw in response.content.iter_any():
                for data in events.feed(raw):
                    turn.add(data)
                if turn.done:
                    return

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cache_key: str | None = None,
        task: str | None = None,
        step: int | None = None,
    ) -> Completion:
        await self._gate.wait()
        request_id = uuid.uuid4().hex
        t0 = time.perf_counter()
        body = completion_request(self.cfg.model, prompt_ids, params, stream=True)
        turn = StreamAccumulator(len(prompt_ids), request_id, self.version, params.max_tokens)
        async with self._slots:
            call = asyncio.ensure_future(self._stream(body, turn))
            self._running[request_id] = (call, cache_key)
            try:
                await call
                completion = turn.completion()
            except asyncio.CancelledError:
                if request_id not in self._aborted:
                    raise  # the caller itself was cancelled
                completion = turn.completion("abort")  # the tokens received before the stream was closed
            except TimeoutError as err:
                silent = isinstance(err, aiohttp.SocketTimeoutError)  # sock_read: no chunk for chunk_timeout_s
                completion = self._failed(
                    request_id,
                    prompt_ids,
                    "error",
                    f"no chunk from {self.base_url} within {self.cfg.chunk_timeout_s:g} s "
                    "(rollout.openai.chunk_timeout_s)"
                    if silent
                    else f"no complete reply from {self.base_url} within {self.cfg.timeout_s:g} s "
                    "(rollout.openai.timeout_s)",
                )
            except (aiohttp.ClientError, ValueError) as err:  # ValueError: ProtocolError, or a body that is not JSON
                completion = self._failed(request_id, prompt_ids, "error", f"{self.base_url}: {err}")
            finally:
                self._running.pop(request_id, None)
                self._aborted.discard(request_id)
        t1 = time.perf_counter()
        self.log.turn(completion, t0, t1, cache_key, task, step)
        return completion

    def _failed(self, request_id: str, prompt_ids: list[int], reason: str, error: str | None) -> Completion:
        self.errors += int(reason == "error")
        return Completion(
            request_id=request_id,
            prompt_len=len(prompt_ids),
            token_ids=[],
            logprobs=[],
            token_versions=[],
            version=self.version,
            finish_reason=reason,  # type: ignore[arg-type]
            error=error,
        )

    async def update_weights(self, payload: CheckpointWritten) -> dict[str, float]:
        """Hold new turns, finish or abort running ones, load the checkpoint ``payload`` names (the hand-off's
        record of it), then resume."""
        handoff = payload
        t0 = time.perf_counter()
        version = int(handoff["version"])
        if version <= self.version and self.reloads:
            return sync_timings(fetch_s=0.0, apply_s=0.0, total_s=0.0, nbytes=0, model_bytes=0)
        plan = self.update_plan  # without per-token versions: always hold and drain, so no turn spans the reload
        if plan.hold_new:
            self._gate.clear()
        try:
            if plan.abort_running:
                self._abort(list(self._running))
            while plan.drain_running and self._running:
                await asyncio.sleep(0.001)
            body = {"model_path": handoff["path"], "version": version}
            try:
                reply = await self._post(self.cfg.reload_path, body, self.cfg.reload_timeout_s)
            except TimeoutError:
                raise ReloadError(
                    f"{self.base_url}{self.cfg.reload_path} did not answer within "
                    f"{self.cfg.reload_timeout_s:g} s (rollout.openai.reload_timeout_s)"
                ) from None
            except (aiohttp.ClientError, ValueError) as err:
                raise ReloadError(f"reloading version {version} on {self.base_url} failed: {err}") from None
            if reply.get("success") is False or int(reply.get("rollarc_version", version)) != version:
                raise ReloadError(f"{self.base_url} did not load version {version} from {handoff['path']}: {reply}")
            self.version = version
            self.reloads.append({"version": version, **{k: v for k, v in reply.items() if k.startswith("rollarc_")}})
        finally:
            self._gate.set()
        t1 = time.perf_counter()
        self.log.sync(t0, t1, version)
        return sync_timings(
            fetch_s=float(handoff.get("write_s", 0.0)),
            apply_s=t1 - t0,
            total_s=t1 - t0,
            nbytes=float(handoff.get("bytes", 0.0)),
            model_bytes=0.0,
        )

    async def catch_up(self) -> CatchUp:
        """The version the server holds; it fetches nothing, by design.

        A built-in replica catches up by pulling the trainer's newest weights; an external server can only load a
        checkpoint the hand-off wrote, and the hand-off writes one per sync, at start (``start_openai_backend``)
        and at every step (``sync_openai``), each followed by a reload. So a server is never behind the newest
        version handed to it, and writing a checkpoint here as well would race the step's own hand-off. Nothing
        calls it on the training path either: a replica that joins mid-run (elastic, harvest) is a built-in
        one, which the config requires (``rollout.backend: builtin``)."""
        return CatchUp(version=self.version)

    async def abort_key(self, cache_key: str) -> int:
        return self._abort([rid for rid, (_, key) in self._running.items() if key == cache_key])

    async def abort_all(self) -> int:
        return self._abort(list(self._running))

    def weights_sha256(self) -> str | None:
        """The digest the server reported for the weights it last loaded (``rollarc serve`` does); None before."""
        digest = self.reloads[-1].get("rollarc_weights_sha256") if self.reloads else None
        return None if digest is None else str(digest)

    def _abort(self, request_ids: list[str]) -> int:
        """Cancel the HTTP requests (the server aborts them when the connection closes); the turns end "abort"."""
        for request_id in request_ids:
            self._aborted.add(request_id)
            self._running[request_id][0].cancel()
        return len(request_ids)

    async def generate_batch(self, turns: list[TurnArgs]) -> AsyncIterator[TurnChunk]:
        """The router's batched path: each turn is its own HTTP request (the server batches them); a Ray
        streaming generator of chunks ``[(index in turns, completion), ...]`` as they finish (``turn_chunks``)."""
        async for chunk in chunks_as_completed([asyncio.ensure_future(self.generate(*turn)) for turn in turns]):
            yield chunk

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool": self.pool,
            "base_url": self.base_url,
            "running": len(self._running),
            "version": self.version,
            "generated_tokens": self.log.generated_tokens,
            "prompt_tokens": self.log.prompt_tokens,
            "errors": self.errors,
            "reloads": list(self.reloads),
        }

    def drain_spans(self) -> list[dict[str, Any]]:
        return self.log.drain()

    async def ping(self) -> str:
        """The actor's health only: the server is external (rollarc cannot restart it), so a dead server fails its
        turns (``finish_reason="error"``, counted) rather than being replaced (``Workers.heal`` skips this backend)."""
        return self.name

    def shutdown(self) -> None:
        """Nothing to stop: the server is external."""


def start_openai_backend(workers: Any, version: int) -> Any:
    """Register one replica per server with the router, hand the start weights over; returns the hand-off actor."""
    cfg = workers.cfg
    backend = cfg.rollout.openai
    pool = cfg.cluster.roles.rollout[0].pool  # labels the servers' turns in routing stats
    handoff = CheckpointHandOff.options(num_cpus=0).remote(  # type: ignore[attr-defined]  # @ray.remote class
        workers.policy_dir, backend.checkpoint_dir.format(name=cfg.name), cfg.sync, workers.trainer, version
    )
    for index, url in enumerate(backend.base_urls):
        name = f"openai-{index}"
        handle = OpenAIReplica.options(num_cpus=0, max_concurrency=10_000).remote(  # type: ignore[attr-defined]  # @ray.remote class
            name, url, backend, cfg.async_.in_flight_update, pool, version
        )
        workers.rollout[name] = handle
        workers.rollout_pool[name] = pool
        ref = workers.router.add_replica.remote(name, handle, pool, backend.max_concurrent_requests)
        workers.deadlines.get(REGISTERING, ref, "the router", "add_replica")
    try:
        workers.deadlines.get("start", sync_openai(workers.rollout, handoff.initial.remote()), "the servers", "reload")
    except RayTaskError as err:
        raise ConfigError(
            f"rollout.openai.base_urls: a server did not load the start weights: "
            f"{err.cause if isinstance(err.cause, ReloadError) else err}"
        ) from None
    return handoff


def sync_openai(replicas: dict[str, Any], written: Any) -> list[Any]:
    """Each server reloads once the checkpoint is written (``written`` is the hand-off's reference)."""
    return [handle.update_weights.remote(written) for handle in replicas.values()]


async def _raise_for_status(response: aiohttp.ClientResponse, url: str) -> None:
    """An HTTP error status as a ClientResponseError carrying the start of the server's message."""
    if response.status >= 400:
        text = (await response.text())[:500]
        raise aiohttp.ClientResponseError(
            response.request_info, (), status=response.status, message=f"HTTP {response.status} from {url}: {text}"
        )
