"""``rollarc serve MODEL_DIR``: rollarc's engine behind an OpenAI-compatible completions API, on Ray Serve.

Endpoints (one Serve deployment, FastAPI ingress):

- ``POST /v1/completions``: one prompt (token ids or text), ``n`` = 1; see :mod:`rollarc.serve.protocol`.
- ``GET /v1/models``: the served model, with ``rollarc_version`` and ``rollarc_weights_sha256``.
- ``POST /update_weights_from_disk`` (SGLang's name; ``/reload`` is the same): body
  ``{"model_path": DIR, "version": V}`` loads the HF checkpoint at DIR into the engine between two decode
  steps and serves it as version V. Tokens decoded after the swap carry V in ``rollarc_token_versions``.

The server binds to 127.0.0.1 unless ``--host`` says otherwise.
"""

# No `from __future__ import annotations`: FastAPI must see `Request` as a class, not a string, in Serve ingress.
import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

import ray
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from rollarc.engine.async_engine import AsyncLLMEngine, EngineDeadError
from rollarc.engine.config import EngineConfig
from rollarc.models.checkpoint import load_policy
from rollarc.ray_local_start import init_local_ray
from rollarc.serve.protocol import RequestError, completion_response, parse_request
from rollarc.serve.weights import state_digest

APP_NAME = "rollarc-serve"
api = FastAPI(title="rollarc serve")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4096)
@serve.ingress(api)
class CompletionServer:
    def __init__(self, model_dir: str, served_model_name: str, version: int, engine_cfg: EngineConfig):
        if engine_cfg.num_threads is not None:
            torch.set_num_threads(engine_cfg.num_threads)
        model, self.tokenizer = load_policy(model_dir)
        self.engine = AsyncLLMEngine(model, engine_cfg, tokenizer=self.tokenizer)
        self.engine.engine.version = version
        self.model_name = served_model_name
        self.model_path = str(model_dir)
        self.digest = state_digest(model.state_dict())
        self._reload = asyncio.Lock()

    def _tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @api.get("/v1/models")
    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "owned_by": "rollarc",
                    "root": self.model_path,
                    "rollarc_version": self.engine.version,
                    "rollarc_weights_sha256": self.digest,
                }
            ],
        }

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> JSONResponse:
        try:
            parsed = parse_request(await request.json(), self.model_name, self._tokenize)
        except RequestError as err:
            return _error(400, str(err))
        except ValueError as err:  # the body is not JSON
            return _error(400, f"the request body is not valid JSON: {err}")
        try:
            completion = await self.engine.generate(parsed.prompt_ids, parsed.params)
        except ValueError as err:  # e.g. prompt longer than the engine's max_model_len
            return _error(400, str(err))
        except EngineDeadError as err:
            return _error(503, str(err), "server_error")
        if completion.finish_reason == "error":
            return _error(500, f"generation failed: {completion.error}", "server_error")
        ids = list(completion.token_ids)
        text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
        pieces = [str(self.tokenizer.decode([t])) for t in ids] if parsed.logprobs and not parsed.tokens_as_ids else []
        return JSONResponse(completion_response(completion, parsed, self.model_name, text, pieces))

    @api.post("/update_weights_from_disk")
    async def update_weights_from_disk(self, request: Request) -> JSONResponse:
        return await self._load(request)

    @api.post("/reload")
    async def reload(self, request: Request) -> JSONResponse:
        return await self._load(request)

    async def _load(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
            path, version = str(body["model_path"]), int(body.get("version", self.engine.version + 1))
        except (ValueError, KeyError, TypeError) as err:
            return _error(400, f"reload needs a JSON body {{'model_path': DIR, 'version': V}}: {err!r}")
        async with self._reload:
            start = time.perf_counter()
            try:
                model, _ = await asyncio.to_thread(load_policy, path)
                await self.engine.update_weights(model.state_dict(), version)
            except (OSError, KeyError, ValueError) as err:
                return JSONResponse(
                    {
                        "success": False,
                        "message": f"could not load {path}: {err}",
                        "rollarc_version": self.engine.version,
                    },
                    status_code=400,
                )
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


def build_app(
    model_dir: str, served_model_name: str = "rollarc", version: int = 0, engine_cfg: EngineConfig | None = None
) -> Any:
    return CompletionServer.bind(  # type: ignore[attr-defined]  # @serve.deployment class
        str(Path(model_dir).resolve()),
        served_model_name,
        version,
        engine_cfg or EngineConfig(),
    )


def start_server(
    model_dir: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str = "rollarc",
    version: int = 0,
    engine_cfg: EngineConfig | None = None,
) -> str:
    """Deploy the server on the connected Ray cluster; returns its base URL once it answers."""
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(model_dir, served_model_name, version, engine_cfg), name=APP_NAME, route_prefix="/")
    return f"http://{host}:{port}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc serve", description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", help="HF-format model directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default="rollarc", help="the `model` name requests must use")
    parser.add_argument("--version", type=int, default=0, help="policy version the initial weights are")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="requests decoded together")
    parser.add_argument("--max-model-len", type=int, default=None, help="prompt + generated tokens at most")
    parser.add_argument("--address", default=None, help="join this Ray cluster instead of starting a local one")
    args = parser.parse_args(argv)
    if not (Path(args.model_dir) / "config.json").is_file():
        print(f"rollarc serve: {args.model_dir} is not an HF-format model directory (no config.json)", file=sys.stderr)
        return 2

    if args.address:
        ray.init(address=args.address, logging_level=logging.WARNING)
    else:
        init_local_ray(logging_level=logging.WARNING, num_cpus=args.threads)
    engine_cfg = EngineConfig(
        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len, num_threads=args.threads
    )
    url = start_server(args.model_dir, args.host, args.port, args.served_model_name, args.version, engine_cfg)
    print(f"rollarc serve: {args.model_dir} at {url}/v1 (version {args.version}); Ctrl-C stops", flush=True)
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop:
        time.sleep(0.5)
    if args.address:  # a shared cluster: take only this application away (without waiting on the controller)
        serve.delete(APP_NAME, _blocking=False)
    ray.shutdown()  # our own local cluster goes with its Serve instance
    return 0
