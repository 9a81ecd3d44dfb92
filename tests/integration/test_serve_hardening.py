"""`rollarc serve` on loopback no request can break: malformed and poison bodies get 4xx, the server keeps serving.

One `rollarc serve` process per module (it starts its own local Ray cluster, as a user would run it), with an
API key from `ROLLARC_API_KEY`, a 64 KiB body cap and a reload directory. Before the fix, one request with
`"stop": [5]` (or a huge `top_k`) killed the engine loop and every later request got 503; `"n": null` and an
over-long prompt got 500; the server's Ray daemons listened on every interface.

That cluster is the server's own, not the suite's shared one (tests/integration/shared_ray.py): the test checks
that the daemons of the cluster `rollarc serve` starts listen on loopback, and Ray Serve's detached controller
would outlive the module on a shared cluster.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import requests
from hypothesis import HealthCheck, given, settings

from tests.integration.test_openai_backend import free_port, stop_server, wait_until_serving
from tests.unit.test_serve_request_validation import BODIES

pytestmark = pytest.mark.slow

KEY = "test-key-3f9a"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 64 * 1024
GOOD = {"prompt": [5, 17, 33], "max_tokens": 4, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(nano_policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reload_dir = tmp_path_factory.mktemp("reload")
    shutil.copytree(nano_policy_dir, reload_dir / "v1")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env["ROLLARC_API_KEY"] = KEY
    args = [str(nano_policy_dir), "--port", str(port), "--max-num-seqs", "64", "--threads", "1"]
    args += ["--max-body-bytes", str(MAX_BODY), "--reload-dir", str(reload_dir)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rollarc.cli", "serve", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, url, log, AUTH)
        yield {"url": url, "pid": proc.pid, "reload_dir": reload_dir, "policy": nano_policy_dir}
    finally:
        stop_server(proc)


def post(server: dict[str, Any], path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
    return requests.post(server["url"] + path, headers=AUTH if headers is None else headers, timeout=120, **kwargs)


def version(server: dict[str, Any]) -> int:
    reply = requests.get(server["url"] + "/v1/models", headers=AUTH, timeout=30)
    return int(reply.json()["data"][0]["rollarc_version"])


def assert_still_serves(server: dict[str, Any]) -> None:
    reply = post(server, "/v1/completions", json=GOOD)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["choices"][0]["token_ids"]) == 4


POISON = [
    ({"prompt": [1, 2], "stop": [5]}, "stop must hold non-empty strings"),
    ({"prompt": [1, 2], "top_k": 10**30}, "top_k must be an integer in [-1, "),
    ({"prompt": [1, 2], "seed": 10**30}, "seed must be an integer in [0, "),
    ({"prompt": [1, 2], "stop_token_ids": [10**6]}, "stop_token_ids must hold integer token ids in [0, "),
    ({"prompt": [1, 10**6]}, "prompt must hold integer token ids in [0, "),
    ({"prompt": [1] * 300}, "prompt has 300 tokens; max_model_len=256 leaves room for at most 255"),
    ({"prompt": [1, 2], "n": 2}, "n must be 1"),
    ({"prompt": [1, 2], "temperature": 1e-30}, "temperature must be 0 (greedy) or in [0.01, 100]"),
    ({"prompt": [1, 2], "max_tokens": 10**6}, "max_tokens must be an integer in [1, 256]"),
]


@pytest.mark.parametrize("body, message", POISON)
def test_poison_bodies_get_400_naming_the_field_and_the_server_keeps_serving(server, body, message):
    reply = post(server, "/v1/completions", json=body)
    assert reply.status_code == 400, reply.text
    assert message in reply.json()["error"]["message"]
    assert_still_serves(server)


def test_null_n_is_one_and_raw_bodies_that_are_not_json_get_400(server):
    reply = post(server, "/v1/completions", json={**GOOD, "n": None})
    assert reply.status_code == 200, reply.text
    for raw in [b"{not json", b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b'{"prompt": [1, 2], "temperature": NaN}']:
        reply = post(server, "/v1/completions", data=raw, headers={**AUTH, "Content-Type": "application/json"})
        assert 400 <= reply.status_code < 500, (raw[:20], reply.text)
    assert_still_serves(server)


def test_oversized_bodies_get_413_whether_or_not_they_declare_a_length(server):
    big = b'{"prompt": "' + b"x" * (MAX_BODY + 10) + b'"}'
    reply = post(server, "/v1/completions", data=big)
    assert reply.status_code == 413 and "--max-body-bytes" in reply.json()["error"]["message"]
    chunked = post(server, "/v1/completions", data=iter([big[:40_000], big[40_000:]]))  # no Content-Length
    assert chunked.status_code == 413, chunked.text
    assert_still_serves(server)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES)
def test_malformed_bodies_never_get_a_5xx(server, body):
    # json.dumps, not requests' json=: requests refuses NaN and infinities (allow_nan=False), which the bodies hold
    raw = json.dumps(body).encode()
    reply = post(server, "/v1/completions", data=raw, headers={**AUTH, "Content-Type": "application/json"})
    assert reply.status_code == 200 or 400 <= reply.status_code < 500, (body, reply.text)


def test_the_server_still_serves_after_the_malformed_bodies(server):
    assert_still_serves(server)
    assert requests.get(server["url"] + "/health", timeout=30).json()["status"] == "ok"


def test_64_parallel_requests_all_succeed(server):
    bodies = [{**GOOD, "prompt": [1 + i % 50, 2, 3], "temperature": 1.0, "seed": i} for i in range(64)]
    with ThreadPoolExecutor(max_workers=64) as pool:
        replies = list(pool.map(lambda b: post(server, "/v1/completions", json=b), bodies))
    assert [r.status_code for r in replies] == [200] * 64
    assert all(len(r.json()["choices"][0]["token_ids"]) == 4 for r in replies)


def test_the_api_key_is_required(server):
    for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}]:
        reply = post(server, "/v1/completions", headers=headers, json=GOOD)
        assert reply.status_code == 401 and "missing or wrong API key" in reply.json()["error"]["message"]
        assert requests.get(server["url"] + "/v1/models", headers=headers, timeout=30).status_code == 401
        assert post(server, "/reload", headers=headers, json={"model_path": "v1"}).status_code == 401
    assert post(server, "/v1/completions", json=GOOD).status_code == 200


def test_reloads_load_only_inside_the_reload_dir(server):
    before = version(server)
    outside = str(server["policy"])  # a real checkpoint, but outside --reload-dir
    for path in [outside, str(server["reload_dir"] / ".." / Path(outside).parent.name / "nano")]:
        reply = post(server, "/update_weights_from_disk", json={"model_path": path, "version": before + 5})
        assert reply.status_code == 403, reply.text
        assert reply.json()["message"] == "model_path is outside the server's --reload-dir; refused"
        assert outside not in reply.text
    assert version(server) == before
    reply = post(server, "/reload", json={"model_path": "v1", "version": before + 1})
    assert reply.status_code == 200 and reply.json()["rollarc_version"] == before + 1, reply.text
    assert version(server) == before + 1


def test_every_socket_of_the_servers_ray_cluster_listens_on_loopback_or_demands_rays_token(server):
    """One exception, which rollarc cannot move: Ray Serve 2.60's replica binds its inter-deployment gRPC server to
    `[::]:0` (hard-coded in ray/serve/_private/replica.py). It refuses a call without Ray's token."""
    pids = {server["pid"], *(p.pid for p in psutil.Process(server["pid"]).children(recursive=True))}
    listening = [
        (psutil.Process(c.pid).name(), c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]
    names = {name for name, _, _ in listening}
    assert {"gcs_server", "raylet"} <= names, listening
    commands = [" ".join(psutil.Process(pid).cmdline()) for pid in pids if psutil.pid_exists(pid)]
    heads = [c for c in commands if "dashboard/dashboard.py" in c]  # without the dashboard, Ray runs a bare head
    assert all("--disable-frontend" in c for c in heads), heads  # the dashboard is off (--dashboard: on)
    exposed = []
    for name, ip, port in listening:
        address = ipaddress.ip_address(ip)
        if not (getattr(address, "ipv4_mapped", None) or address).is_loopback:
            exposed.append((name, port))
    assert [name for name, _ in exposed] == ["ray::ServeReplica:rollarc-serve:CompletionServer"], listening
    with grpc.insecure_channel(f"127.0.0.1:{exposed[0][1]}") as channel, pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary("/ray.serve.ASGIService/HandleRequest")(b"", timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
