"""`rollarc serve` on a tiny model in a local Ray cluster, and `rollarc train` with rollout.backend: openai.

The test process starts the cluster; `rollarc serve --address` and `rollarc train --address` join it as
their own drivers (a driver that started a cluster takes it down when it disconnects, so training cannot
run in this process and leave the server up for the checks afterwards).

That module-scoped cluster is the test process's own, not the suite's shared one (tests/integration/shared_ray.py):
`rollarc serve` starts Ray Serve on it, whose detached controller and HTTP proxy would outlive the module on a
shared cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray
import requests
import yaml

from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.rayproc.local_start import init_local_ray
from rollarc.serve.config import OpenAIBackendConfig
from rollarc.serve.protocol import completion_request, parse_completion
from rollarc.serve.weights import state_digest

pytestmark = pytest.mark.slow

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
LOGPROB_TOLERANCE = 1e-5  # same engine code and fp32 weights on both sides; only the process differs
STARTUP_S = 240.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rollarc(*args: str) -> list[str]:
    return [sys.executable, "-m", "rollarc.cli", *args]


@pytest.fixture(scope="module")
def server(nano_policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    init_local_ray(
        num_cpus=2,
        resources={"pool_compute": 2.0, "pool_cpu": 2.0},
        include_dashboard=False,
        logging_level="warning",
    )
    address = ray.get_runtime_context().gcs_address
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    try:
        # every checkpoint the tests reload (hand-offs, the policy, a missing one) lies in pytest's base temp
        with serving(nano_policy_dir, address, tmp_path_factory.getbasetemp(), log, max_num_seqs=16) as url:
            yield {"url": url, "address": address}
    finally:
        ray.shutdown()


@contextlib.contextmanager
def serving(policy_dir: Path, address: str, reload_dir: Path, log: Path, max_num_seqs: int) -> Iterator[str]:
    """`rollarc serve` on ``policy_dir``, joined to the cluster at ``address`` as its own driver; yields its URL."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            rollarc(
                "serve",
                str(policy_dir),
                "--port",
                str(port),
                "--address",
                address,
                "--max-num-seqs",
                str(max_num_seqs),
                "--reload-dir",
                str(reload_dir),
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, url, log)
        yield url
    finally:
        stop_server(proc)


def wait_until_serving(proc: subprocess.Popen, url: str, log: Path, headers: dict[str, str] | None = None) -> None:
    """Poll ``url``/v1/models until it answers 200; fail with the server's log if it exits or takes too long."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            if requests.get(url + "/v1/models", headers=headers, timeout=5).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass  # the proxy is not listening, or not routing, yet
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"rollarc serve did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(1.0)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def complete(url: str, prompt: list[int], params: SamplingParams) -> Any:
    reply = requests.post(url + "/v1/completions", json=completion_request("rollarc", prompt, params), timeout=120)
    assert reply.status_code == 200, reply.text
    return parse_completion(reply.json(), len(prompt), "t", fallback_version=-1)


def test_served_completions_equal_the_builtin_engine(server, nano_policy_dir):
    model, _ = load_policy(nano_policy_dir)
    engine = LLMEngine(model, EngineConfig(max_num_seqs=4, num_threads=1))
    prompts = [[5, 17, 33, 2, 9], [40, 41]]
    for params in [
        SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
        SamplingParams(temperature=1.0, max_tokens=8, seed=1234, ignore_eos=True),
    ]:
        for prompt in prompts:
            (local,) = engine.generate([prompt], params)
            served = complete(server["url"], prompt, params)
            assert served.token_ids == local.token_ids and len(served.token_ids) == 8
            assert max(abs(a - b) for a, b in zip(served.logprobs, local.logprobs, strict=True)) <= LOGPROB_TOLERANCE
            assert served.token_versions == [0] * 8 and served.version == 0


def test_unreachable_server_and_failed_reload_give_clear_errors(server, tmp_path):
    from rollarc.runtime.openai_replica import OpenAIReplica

    dead_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = OpenAIBackendConfig(base_urls=[dead_url], timeout_s=10.0, reload_timeout_s=10.0)
    dead = OpenAIReplica.options(num_cpus=0).remote("dead", dead_url, cfg, "finish", "compute", 0)
    completion = ray.get(dead.generate.remote([1, 2], SamplingParams(max_tokens=2)))
    assert completion.finish_reason == "error" and dead_url in completion.error and completion.token_ids == []
    live = OpenAIReplica.options(num_cpus=0).remote("live", server["url"], cfg, "finish", "compute", 0)
    with pytest.raises(ray.exceptions.RayTaskError, match=r"reloading version 1 on .* not an HF-format model"):
        ray.get(live.update_weights.remote({"path": str(tmp_path / "missing"), "version": 1}))
    assert requests.get(server["url"] + "/v1/models", timeout=30).json()["data"][0]["rollarc_version"] == 0
    ray.kill(dead)
    ray.kill(live)


def test_a_run_whose_server_is_unreachable_stops_at_start_with_a_config_error(server, nano_policy_dir, tmp_path):
    from rollarc.config import Config
    from rollarc.config.io import ConfigError, validate
    from rollarc.rayproc.deadline import Deadlines
    from rollarc.runtime.openai_replica import start_openai_backend
    from rollarc.runtime.router import Router

    dead_url = f"http://127.0.0.1:{free_port()}"
    cfg = validate(
        Config,
        {
            "name": "dead",
            "tasks": [{"name": "t", "env": {"id": "frozen_lake"}}],
            "rollout": {
                "backend": "openai",
                "openai": {"base_urls": [dead_url], "checkpoint_dir": str(tmp_path / "h"), "reload_timeout_s": 10},
            },
        },
    )
    workers = SimpleNamespace(
        cfg=cfg,
        policy_dir=str(nano_policy_dir),
        trainer=None,
        rollout={},
        rollout_pool={},
        router=Router.options(num_cpus=0).remote({"t": None}),
        deadlines=Deadlines.of(cfg.cluster),
    )
    with pytest.raises(ConfigError, match=f"rollout.openai.base_urls: .*reloading version 0 on {dead_url} failed"):
        start_openai_backend(workers, 0)
    assert (tmp_path / "h" / "v00000000" / "config.json").is_file()  # the start weights were handed off first
    for handle in [workers.router, *workers.rollout.values()]:
        ray.kill(handle)


def test_training_with_the_openai_backend_reloads_the_trainers_weights(server, nano_policy_dir, tmp_path):
    initial = requests.get(server["url"] + "/v1/models", timeout=30).json()["data"][0]
    handoff = tmp_path / "handoff"
    config = {
        "name": "oai",
        "model": {"path": str(nano_policy_dir)},
        "plugin_paths": [str(PLUGINS)],
        "tasks": [
            {
                "name": "scripted",
                "env": {"entry_point": "runtime_plugins:ScriptedEnv", "kwargs": {"turns": 2, "reward_by_length": True}},
                "agent": {"max_turns": 4, "max_tokens_per_turn": 3, "history": "full", "context_limit": 200},
            }
        ],
        "train": {
            "steps": 2,
            "groups_per_step": 2,
            "group_size": 2,
            "lr": 1e-3,
            "eval_every": 0,
            "eval_episodes": 2,
            "checkpoint_every": 1,
        },
        "rollout": {
            "backend": "openai",
            "openai": {
                "base_urls": [server["url"]],
                "checkpoint_dir": str(handoff),
                "timeout_s": 60,
                "reload_timeout_s": 120,
            },
        },
        "cluster": {
            "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        },
        "run": {"dir": str(tmp_path / "runs"), "progress": False, "tensorboard": False},
    }
    path = tmp_path / "oai.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        rollarc("train", str(path), "--address", server["address"]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ.copy(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["trajectories"] == 4 for r in rows)
    assert all(r["generated_tokens"] > 0 for r in rows)

    served = requests.get(server["url"] + "/v1/models", timeout=30).json()["data"][0]
    assert (initial["rollarc_version"], served["rollarc_version"]) == (0, 2)
    trained, _ = load_policy(run / "checkpoints" / "step_000002" / "policy")
    assert served["rollarc_weights_sha256"] == state_digest(trained.state_dict())  # bitwise the trainer's
    assert served["rollarc_weights_sha256"] != initial["rollarc_weights_sha256"]  # training changed them
    written, _ = load_policy(handoff / "v00000002")
    assert state_digest(written.state_dict()) == served["rollarc_weights_sha256"]
    assert sorted(p.name for p in handoff.iterdir() if p.name.startswith("v")) == ["v00000001", "v00000002"]


def test_reload_with_abort_ends_the_running_turn_and_serves_the_new_version(server, nano_policy_dir):
    from rollarc.runtime.openai_replica import OpenAIReplica

    cfg = OpenAIBackendConfig(base_urls=[server["url"]], timeout_s=120.0)
    replica = OpenAIReplica.options(num_cpus=0, max_concurrency=100).remote(
        "aborting", server["url"], cfg, "abort", "compute", 0
    )
    serving_version = requests.get(server["url"] + "/v1/models", timeout=30).json()["data"][0]["rollarc_version"]
    long_turn = replica.generate.remote([1, 2], SamplingParams(max_tokens=250, ignore_eos=True))
    deadline = time.monotonic() + 60.0
    while ray.get(replica.stats.remote())["running"] == 0:  # the request is on the wire before the reload
        assert not ray.wait([long_turn], timeout=0)[0], ray.get(long_turn).error
        assert time.monotonic() < deadline, "the long turn never started"
        time.sleep(0.01)
    ray.get(replica.update_weights.remote({"path": str(nano_policy_dir), "version": 100}))
    aborted = ray.get(long_turn)
    kept = len(aborted.token_ids)  # the tokens streamed before the abort closed the stream (none, if it came first)
    assert aborted.finish_reason == "abort" and kept < 250
    assert len(aborted.logprobs) == kept and aborted.token_versions == [serving_version] * kept
    after = ray.get(replica.generate.remote([1, 2], SamplingParams(temperature=0.0, max_tokens=3)))
    assert after.finish_reason == "length" and after.token_versions == [100, 100, 100] and after.version == 100
    ray.kill(replica)
