"""``rollarc serve MODEL_DIR``: rollarc's engine behind an OpenAI-compatible completions API, on Ray Serve.

Endpoints (one Serve deployment, FastAPI ingress):

- ``POST /v1/completions``: one prompt (token ids or text), ``n`` = 1; see :mod:`rollarc.serve.protocol`. With
  ``stream: true`` the reply is server-sent events, a chunk per engine step (:mod:`rollarc.serve.stream`); a
  client that disconnects mid-stream aborts its request in the engine.
- ``GET /v1/models``: the served model, with ``rollarc_version`` and ``rollarc_weights_sha256``.
- ``POST /update_weights_from_disk`` (SGLang's name; ``/reload`` is the same): body
  ``{"model_path": DIR, "version": V}`` loads the HF checkpoint at DIR (which must lie inside ``--reload-dir``)
  into the engine between two decode steps and serves it as version V. Tokens decoded after the swap carry V
  in ``rollarc_token_versions``.
- ``GET /health``: 200 while the engine runs, 503 once it is dead (no key needed: it says nothing else).

No request can break the server: every field is checked before it reaches the engine (HTTP 400 naming it),
bodies are capped (413), an API key may be required (401), and the engine fails a request alone when its
own processing raises. If the engine loop dies anyway, ``check_health`` raises and Ray Serve replaces the
replica. The server binds to 127.0.0.1 unless ``--host`` says otherwise. The command line is in
:mod:`rollarc.serve.cli`.
"""

# No `from __future__ import annotations`: FastAPI must see `Request` as a class, not a string, in Serve ingress.
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from rollarc.engine.async_engine import AsyncLLMEngine, EngineDeadError
from rollarc.engine.config import EngineConfig
from rollarc.models.checkpoint import load_policy
from rollarc.serve.access import AccessError, ServerAccess
from rollarc.serve.protocol import ParsedRequest, RequestError, RequestLimits, completion_response, parse_request
from rollarc.serve.request_fields import int_field
from rollarc.serve.stream import SSE_DONE, ChunkWriter, sse_error, sse_event
from rollarc.serve.weights import state_digest

APP_NAME = "rollarc-serve"
MAX_VERSION = 2**63 - 1
api = FastAPI(title="rollarc serve")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


class CompletionServer:
    """The server's logic; :data:`CompletionDeployment` is it as a Ray Serve deployment (a plain class, so tests
    construct it without Ray)."""

    def __init__(
        self,
        model_dir: str,
        served_model_name: str,
        version: int,
        engine_cfg: EngineConfig,
        access: ServerAccess | None = None,
    ):
        if engine_cfg.num_threads is not None:
            torch.set_num_threads(engine_cfg.num_threads)
        model, self.tokenizer = load_policy(model_dir)
        self.engine = AsyncLLMEngine(model, engine_cfg, tokenizer=self.tokenizer)
        self.engine.engine.version = version
        self.limits = RequestLimits(
            vocab_size=self.engine.engine.vocab_size, max_model_len=self.engine.engine.max_model_len
        )
        self.access = access or ServerAccess()
        self.model_name = served_model_name
        self.model_path = str(model_dir)
        self.digest = state_digest(model.state_dict())
        self._reload = asyncio.Lock()
        self._tokenizer_lock = threading.Lock()

    def check_health(self) -> None:
        """Ray Serve's probe: raising marks the replica unhealthy, and Serve starts a new one in its place."""
        self.engine.check_alive()

    def _tokenize(self, text: str) -> list[int]:
        # One at a time: a fast tokenizer's encode may set its truncation state, and two threads doing so at
        # once raise "Already borrowed" (huggingface/tokenizers#537).
        with self._tokenizer_lock:
            return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def _json_body(self, request: Request) -> Any:
        """The authorised request's JSON body, read up to the size cap; raises :class:`AccessError`."""
        self.access.check_key(request.headers.get("authorization"))
        self.access.check_length(request.headers.get("content-length"))
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            self.access.check_size(len(raw))
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as err:  # not UTF-8, not JSON, or nested too deep for the parser
            raise AccessError(400, f"the request body is not valid JSON: {str(err)[:200]}") from None

    @api.get("/health")
    def health(self) -> JSONResponse:
        try:
            self.engine.check_alive()
        except EngineDeadError as err:
            return _error(503, str(err), "server_error")
        return JSONResponse({"status": "ok", "rollarc_version": self.engine.version})

    @api.get("/v1/models")
    def models(self, request: Request) -> JSONResponse:
        try:
            self.access.check_key(request.headers.get("authorization"))
        except AccessError as err:
            return _error(err.status, str(err))
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "owned_by": "rollarc",
                        "root": self.model_path,
                        "rollarc_version": self.engine.version,
                        "rollarc_weights_sha256": self.digest,
                        "rollarc_requests": self._unfinished(),
                        "rollarc_aborted": int(self.engine.stats()["abort"]),  # requests aborted (streams left)
                    }
                ],
            }
        )

    @api.post("/v1/completions", response_model=None)  # a JSON reply, or server-sent events with stream: true
    async def completions(self, request: Request) -> JSONResponse | StreamingResponse:
        try:
            body = await self._json_body(request)
            # Off the event loop: a text prompt is tokenised here (after its character cap).
            parsed = await asyncio.to_thread(parse_request, body, self.model_name, self._tokenize, self.limits)
        except AccessError as err:
            return _error(err.status, str(err))
        except RequestError as err:
            return _error(400, str(err))
        if parsed.stream:
            return StreamingResponse(
                self._stream(parsed), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        try:
            completion = await self.engine.generate(parsed.prompt_ids, parsed.params)
        except ValueError as err:  # the engine refused the request's arguments
            return _error(400, str(err))
        except EngineDeadError as err:
            return _error(503, str(err), "server_error")
        if completion.finish_reason == "error":
            return _error(500, f"generation failed: {completion.error}", "server_error")
        ids = list(completion.token_ids)
        text = self._decode(ids)
        pieces = [self._piece(t) for t in ids] if parsed.logprobs and not parsed.tokens_as_ids else []
        return JSONResponse(completion_response(completion, parsed, self.model_name, text, pieces))

    async def _stream(self, parsed: ParsedRequest) -> AsyncIterator[bytes]:
        """The completion as server-sent events: a chunk per engine step that sampled tokens (the steps a slow
        reader let pile up go out as one), then the final one.

        The queue holds at most one entry per token of ``max_tokens``. When the client goes away, Starlette (or
        Ray Serve's proxy) cancels this generator and ``finally`` cancels the generation: the engine aborts it.
        """
        steps: asyncio.Queue[tuple[list[int], list[float], list[int]] | None] = asyncio.Queue()
        task = asyncio.ensure_future(
            self.engine.generate(
                parsed.prompt_ids,
                parsed.params,
                on_tokens=lambda ids, logprobs, versions: steps.put_nowait((ids, logprobs, versions)),
            )
        )
        task.add_done_callback(lambda _: steps.put_nowait(None))
        chunks = ChunkWriter(self.model_name, parsed, self._decode, self._piece)
        try:
            ended = False
            while not ended:
                pending = [await steps.get()]
                while not steps.empty():  # one chunk for every step a slow reader let pile up
                    pending.append(steps.get_nowait())
                ended = pending[-1] is None  # the end comes after every step's tokens (one loop, in order)
                new = [step for step in pending if step is not None]
                if new:
                    ids = [t for step in new for t in step[0]]
                    logprobs = [x for step in new for x in step[1]]
                    yield sse_event(chunks.tokens(ids, logprobs, [v for step in new for v in step[2]]))
            try:
                completion = task.result()
            except ValueError as err:  # the engine refused the request's arguments
                yield sse_error(400, str(err), "invalid_request_error")
            except EngineDeadError as err:
                yield sse_error(503, str(err))
            else:
                if completion.finish_reason == "error":
                    yield sse_error(500, f"generation failed: {completion.error}")
                else:
                    yield sse_event(chunks.final(completion))
            yield SSE_DONE
        finally:
            task.cancel()  # a no-op once it finished; else the client left and the engine aborts the request

    def _unfinished(self) -> int:
        """Requests in the engine (running or waiting) as of its latest step: 0 once every stream has ended."""
        stats = self.engine.stats()
        return int(stats["running"]) + int(stats["waiting"])

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _piece(self, token: int) -> str:
        """One token's text as ``logprobs.tokens`` shows it (special tokens included)."""
        return str(self.tokenizer.decode([token]))

    @api.post("/update_weights_from_disk")
    async def update_weights_from_disk(self, request: Request) -> JSONResponse:
        return await self._load(request)

    @api.post("/reload")
    async def reload(self, request: Request) -> JSONResponse:
        return await self._load(request)

    async def _load(self, request: Request) -> JSONResponse:
        try:
            body = await self._json_body(request)
            if not isinstance(body, dict):
                raise AccessError(400, "reload needs a JSON body {'model_path': DIR, 'version': V}")
            target = self.access.reload_target(body.get("model_path"))
            version = int_field(body, "version", self.engine.version + 1, 0, MAX_VERSION)
        except AccessError as err:
            return self._load_failed(err.status, str(err))
        except RequestError as err:
            return self._load_failed(400, str(err))
        path = str(target)
        async with self._reload:
            start = time.perf_counter()
            try:
                model, _ = await asyncio.to_thread(load_policy, path)
                await self.engine.update_weights(model.state_dict(), int(version or 0))
            except (OSError, KeyError, ValueError) as err:
                return self._load_failed(400, f"could not load {path}: {err}")
            except EngineDeadError as err:
                return self._load_failed(503, str(err))
            self.digest = await asyncio.to_thread(state_digest, self.engine.engine.model.state_dict())
            self.model_path = path
        return JSONResponse(
            {
                "success": True,
                "message": f"loaded {path} as version {version}",
                "rollarc_version": self.engine.version,
                "rollarc_weights_sha256": self.digest,
                "load_s": time.perf_counter() - start,
            }
        )

    def _load_failed(self, status: int, message: str) -> JSONResponse:
        return JSONResponse(
            {"success": False, "message": message, "rollarc_version": self.engine.version}, status_code=status
        )


CompletionDeployment = serve.deployment(
    name="CompletionServer", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4096
)(serve.ingress(api)(CompletionServer))


def build_app(
    model_dir: str,
    served_model_name: str = "rollarc",
    version: int = 0,
    engine_cfg: EngineConfig | None = None,
    access: ServerAccess | None = None,
) -> Any:
    return CompletionDeployment.bind(
        str(Path(model_dir).resolve()),
        served_model_name,
        version,
        engine_cfg or EngineConfig(),
        access or ServerAccess(),
    )


def start_server(
    model_dir: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str = "rollarc",
    version: int = 0,
    engine_cfg: EngineConfig | None = None,
    access: ServerAccess | None = None,
) -> str:
    """Deploy the server on the connected Ray cluster; returns its base URL once it answers.

    ``access`` (default: no key, 1 MiB bodies, reloads refused) says who may call it and what it may load.
    """
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(model_dir, served_model_name, version, engine_cfg, access), name=APP_NAME, route_prefix="/")
    return f"http://{host}:{port}"
