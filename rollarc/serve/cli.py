"""The ``rollarc serve`` command line: parse the flags, start (or join) Ray, deploy :mod:`rollarc.serve.app`.

Its own module so that a local cluster is asked for loopback-only addresses before anything imports Ray
(``rollarc.rayproc.loopback`` says why that must come first), as ``rollarc train`` does.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rollarc.rayproc.loopback import keep_local_ray_on_loopback
from rollarc.serve.access import API_KEY_ENV, DEFAULT_MAX_BODY_BYTES, ServerAccess


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollarc serve", description="rollarc's engine behind an OpenAI-compatible completions API"
    )
    parser.add_argument("model_dir", help="HF-format model directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default="rollarc", help="the `model` name requests must use")
    parser.add_argument("--version", type=int, default=0, help="policy version the initial weights are")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="requests decoded together")
    parser.add_argument("--max-model-len", type=int, default=None, help="prompt + generated tokens at most")
    parser.add_argument("--address", default=None, help="join this Ray cluster instead of starting a local one")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        help=f"require 'Authorization: Bearer KEY' on every endpoint but /health (default: ${API_KEY_ENV}; "
        "unset: no key)",
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="larger request bodies get HTTP 413"
    )
    parser.add_argument(
        "--reload-dir",
        default=None,
        help="reloads may load checkpoints inside this directory only (default: reloads are refused, HTTP 403)",
    )
    parser.add_argument("--dashboard", action="store_true", help="start the Ray dashboard of a local cluster (off)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not (Path(args.model_dir) / "config.json").is_file():
        print(f"rollarc serve: {args.model_dir} is not an HF-format model directory (no config.json)", file=sys.stderr)
        return 2
    try:
        access = ServerAccess.build(args.api_key, args.max_body_bytes, args.reload_dir)
    except ValueError as err:
        print(f"rollarc serve: {err}", file=sys.stderr)
        return 2
    if not args.address:
        keep_local_ray_on_loopback()  # before Ray is imported (rollarc.rayproc.loopback says why)
    import ray  # deferred: Ray, torch and the engine (Ray only after the loopback setting above)
    from ray import serve

    from rollarc.engine.config import EngineConfig
    from rollarc.rayproc.local_start import init_local_ray
    from rollarc.serve.app import APP_NAME, start_server

    if args.address:
        ray.init(address=args.address, logging_level=logging.WARNING)
    else:
        init_local_ray(logging_level=logging.WARNING, num_cpus=args.threads, include_dashboard=args.dashboard)
    engine_cfg = EngineConfig(
        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len, num_threads=args.threads
    )
    url = start_server(args.model_dir, args.host, args.port, args.served_model_name, args.version, engine_cfg, access)
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
