"""One contract suite for every rollout replica (``rollarc.runtime.replica_protocol.RolloutReplica``).

Each implementation, started as the runtime starts it on one local Ray cluster with the ``tiny`` policy (vLLM's
CPU attention needs head_dim 32 or more, ``nano`` has 16), must:
answer ``ping`` with its name; generate the greedy tokens and log-probs of rollarc's engine on the same
weights; abort one trajectory's turn mid-generation and return it ``finish_reason="abort"`` with its partial
output (a prefix of the uninterrupted turn; the OpenAI backend streams, and its server aborts the request when the
stream closes); ``catch_up`` to the trainer's version (an OpenAI server: the version of its last reload); apply an ``update_weights``
in place so that the weights it generates with hash bitwise to the trainer's, and generate under the new version;
count its tokens in ``stats`` and put every turn and the sync on its spans; once its engine died under the living
actor (built-in and vLLM), answer a turn and a ping with ``EngineDeadError``.

Implementations: the built-in engine, the co-serving replica (with no serving traffic), vLLM's CPU build (skipped
when ``vllm`` is not importable: ``make test`` installs it on x86-64) and the OpenAI backend against
``rollarc serve``. Each replica takes up to a minute to start here (vLLM's engine, the co-serving calibration).

The module starts one Ray cluster of its own (the ``cluster`` fixture), not the suite's shared one
(tests/integration/shared_ray.py): the OpenAI case's ``rollarc serve --address`` joins it and starts Ray Serve on
it, whose detached controller and HTTP proxy would outlive the module on a shared cluster.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
import requests
import torch

from rollarc.config.harvest import HarvestConfig
from rollarc.config.io import validate
from rollarc.engine.async_engine import EngineDeadError
from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import Completion, SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.rayproc.local_start import init_local_ray
from rollarc.runtime.replica_protocol import STATS_KEYS, CatchUp
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.serve.config import OpenAIBackendConfig, VLLMBackendConfig
from rollarc.serve.weights import state_digest
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher
from tests.integration.test_openai_backend import serving

pytestmark = pytest.mark.slow

WAIT_S = 240.0  # every ray.get: a replica's start (vLLM's engine, the co-serving calibration) included
PROMPT = [5, 17, 33, 2, 9]
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
SHORT = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
LONG = SamplingParams(temperature=0.0, max_tokens=240, ignore_eos=True)  # within the engines' 256 positions
LOGPROB_TOLERANCE = 2e-4  # vLLM's CPU kernels sum in another order (tests/integration/test_vllm_backend.py)
SHIFT = 0.01  # version v's weights: the start weights + v · SHIFT (floating tensors)
IMPLEMENTATIONS = ["builtin", "coserving", "vllm", "openai"]


def kill_builtin_engine(handle: Any) -> None:
    """The built-in engine's loop thread dies of a bad update, as of any bug; the actor answers on."""

    def poison(worker: Any) -> None:
        worker.engine.update_weights_nowait(42, -1)  # not iterable: the loop thread raises TypeError and ends
        worker.engine._thread.join(timeout=30)

    ray.get(handle.__ray_call__.remote(poison), timeout=WAIT_S)


def kill_vllm_engine_core(handle: Any) -> None:
    """vLLM's engine core (the child process it spawned) is killed, as by the OOM killer; the actor answers on."""

    def kill_children(worker: Any) -> int:
        children = psutil.Process().children(recursive=True)
        for child in children:
            child.kill()
        psutil.wait_procs(children, timeout=30)
        return len(children)

    assert ray.get(handle.__ray_call__.remote(kill_children), timeout=WAIT_S) >= 1


KILLABLE = {"builtin": kill_builtin_engine, "vllm": kill_vllm_engine_core}


def weights_of(start: dict[str, torch.Tensor], version: int) -> dict[str, torch.Tensor]:
    return {n: t + version * SHIFT if t.is_floating_point() else t.clone() for n, t in start.items()}


@ray.remote
class Trainer:
    """The trainer's side of weight sync, as replicas call it: ``fetch_weights(have, layout)``."""

    def __init__(self, policy_dir: str) -> None:
        torch.set_num_threads(1)
        self.start = dict(load_policy(policy_dir)[0].state_dict())
        self.publisher = WeightPublisher(SyncConfig())
        self.publisher.publish(self.start, version=0)

    def publish(self, version: int) -> SyncPayload:
        self.publisher.publish(weights_of(self.start, version), version=version)
        updates = self.publisher.latest(WHOLE)
        return SyncPayload(version=version, method="full" if updates[0].full else "delta", refs=[ray.put(updates)])

    def fetch_weights(self, have: int | None, layout: Any = WHOLE) -> tuple[VersionedUpdate, ...]:
        return self.publisher.fetch(layout, have)

    def digest(self) -> str:
        return state_digest(self.publisher.shard(WHOLE))


@dataclass
class Case:
    """A started replica, how its weight updates are delivered, and what it can do."""

    name: str
    handle: Any
    trainer: Any
    deliver: Any  # SyncPayload -> what the replica's update_weights takes (a reference)
    # catch_up fetches from the trainer; an external server is brought up to date by the hand-off's reload at every
    # sync, so it is never behind what was handed to it, and nothing calls catch_up on it (OpenAIReplica.catch_up)
    fetches: bool
    server: str | None = None  # the OpenAI backend's server, whose engine must abort the request of an aborted turn


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    init_local_ray(
        num_cpus=2, resources={"pool_compute": 2.0, "pool_cpu": 2.0}, include_dashboard=False, logging_level="warning"
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def reference(tiny_policy_dir: Path) -> dict[str, Completion]:
    """rollarc's engine in this process: the greedy turns at version 0, and the greedy turn at version 2."""
    model, _ = load_policy(tiny_policy_dir)
    start = {n: t.clone() for n, t in model.state_dict().items()}
    engine = LLMEngine(model, EngineConfig(max_num_seqs=4, num_threads=1))
    (greedy,) = engine.generate([PROMPT], GREEDY)
    (long,) = engine.generate([PROMPT], LONG)
    model.load_state_dict(weights_of(start, 2))
    (updated,) = LLMEngine(model, EngineConfig(max_num_seqs=4, num_threads=1)).generate([PROMPT], GREEDY)
    return {"greedy": greedy, "long": long, "updated": updated}


@pytest.fixture(scope="module")
def server(cluster: None, tiny_policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rollarc serve`` on the tiny policy, joined to the module's cluster as its own driver."""
    log = tmp_path_factory.mktemp("contract-serve") / "serve.log"
    address = ray.get_runtime_context().gcs_address
    with serving(tiny_policy_dir, address, tmp_path_factory.getbasetemp(), log, max_num_seqs=4) as url:
        yield url


def start_case(kind: str, policy_dir: str, request: pytest.FixtureRequest, tmp_path: Path) -> Case:
    from rollarc.runtime.coserving_replica import CoServingReplica
    from rollarc.runtime.openai_replica import OpenAIReplica
    from rollarc.runtime.rollout_worker import RolloutWorker
    from rollarc.runtime.vllm_replica import VLLMRolloutWorker
    from rollarc.runtime.weight_handoff import CheckpointHandOff

    trainer = Trainer.options(num_cpus=0).remote(policy_dir)
    engine = EngineConfig(max_num_seqs=4, max_model_len=256)
    options = {"num_cpus": 0, "max_concurrency": 1000}
    name = f"contract-{kind}"
    if kind == "builtin":
        handle = RolloutWorker.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
            name, policy_dir, engine, "abort", 1, "compute", 0, SyncConfig(), trainer
        )
        return Case(name, handle, trainer, lambda payload: payload, fetches=True)
    if kind == "vllm":
        handle = VLLMRolloutWorker.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
            name, policy_dir, engine, "abort", 1, "compute", 0, SyncConfig(), trainer, "float32",
            VLLMBackendConfig(kv_cache_mb=64),
        )  # fmt: skip
        return Case(name, handle, trainer, lambda payload: payload, fetches=True)
    if kind == "coserving":
        harvest = validate(
            HarvestConfig,
            {
                "serving": {"preset": "nano", "seed": 99, "max_model_len": 256, "max_num_seqs": 4},
                "slo_source": "fixed",
                "slo": {"ttft_p99_ms": 1e6, "tpot_p99_ms": 1e6},  # no serving traffic: the guard admits every step
                "memory_tokens": 1024,
                "replay": {"duration_s": 10.0, "max_prompt_tokens": 16, "max_output_tokens": 4},
            },
        )
        handle = CoServingReplica.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
            name, policy_dir, engine, harvest, "abort", 0, SyncConfig(), trainer, trace=[]
        )
        ray.get(handle.start.remote(), timeout=WAIT_S)
        return Case(name, handle, trainer, lambda payload: payload, fetches=True)
    url = request.getfixturevalue("server")
    handoff = CheckpointHandOff.options(num_cpus=0).remote(  # type: ignore[attr-defined]  # @ray.remote class
        policy_dir, str(tmp_path / "handoff"), SyncConfig(), trainer, 0
    )
    cfg = OpenAIBackendConfig(base_urls=[url], timeout_s=120.0, reload_timeout_s=120.0)
    handle = OpenAIReplica.options(**options).remote(name, url, cfg, "abort", "compute", 0)  # type: ignore[attr-defined]  # @ray.remote class
    # the hand-off writes the checkpoint once per version; the replica gets its record (path, version, bytes)
    return Case(name, handle, trainer, handoff.write.remote, fetches=False, server=url)


def get(ref: Any) -> Any:
    return ray.get(ref, timeout=WAIT_S)


def server_counts(url: str) -> dict[str, Any]:
    """``rollarc serve``'s model record once its engine holds no request (bounded wait: the abort is asynchronous)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        served = requests.get(url + "/v1/models", timeout=30).json()["data"][0]
        if served["rollarc_requests"] == 0 or time.monotonic() > deadline:
            return dict(served)
        time.sleep(0.05)


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_the_replica_contract(
    kind: str,
    cluster: None,
    reference: dict[str, Completion],
    tiny_policy_dir: Path,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    if kind == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM's CPU build is not installed here (pip install -e '.[vllm]': docs/gpu.md)")
    case = start_case(kind, str(tiny_policy_dir), request, tmp_path)
    replica = case.handle
    try:
        assert get(replica.ping.remote()) == case.name

        # greedy tokens and log-probs of rollarc's engine on the same weights, all under version 0
        greedy: Completion = get(replica.generate.remote(PROMPT, GREEDY, "k-greedy", "t", 0))
        assert greedy.token_ids == reference["greedy"].token_ids and greedy.finish_reason == "length"
        assert greedy.logprobs == pytest.approx(reference["greedy"].logprobs, abs=LOGPROB_TOLERANCE)
        assert greedy.token_versions == [0] * GREEDY.max_tokens

        # an abort of one trajectory: the short turn of the batch has finished, so the long one has decoded beside it
        stream = replica.generate_batch.remote([(PROMPT, SHORT, "k-short", "t", 0), (PROMPT, LONG, "k-long", "t", 0)])
        first = get(next(stream))
        assert [i for i, _ in first] == [0] and first[0][1].token_ids == reference["greedy"].token_ids[
            : SHORT.max_tokens
        ]
        assert get(replica.abort_key.remote("k-long")) == 1
        ((index, aborted),) = get(next(stream))
        assert index == 1 and aborted.finish_reason == "abort"
        kept = len(aborted.token_ids)
        assert aborted.token_ids == reference["long"].token_ids[:kept] and len(aborted.logprobs) == kept
        assert aborted.token_versions == [0] * kept
        assert 1 <= kept < LONG.max_tokens  # a streaming engine may have delivered fewer than the short turn's
        assert get(replica.abort_all.remote()) == 0  # nothing left running
        if case.server is not None:  # the closed stream aborted the request in the server's engine too
            served = server_counts(case.server)
            assert (served["rollarc_requests"], served["rollarc_aborted"]) == (0, 1)

        # catch-up: the trainer is one version ahead
        get(case.trainer.publish.remote(1))
        caught: CatchUp = get(replica.catch_up.remote())
        if case.fetches:
            assert caught.version == 1 and caught.bytes > 0
            assert get(replica.weights_sha256.remote()) == get(case.trainer.digest.remote())
        else:
            assert caught == CatchUp(version=0)

        # an update applied in place: the weights the engine generates with are the trainer's, bit for bit
        payload = get(case.trainer.publish.remote(2))
        timings = get(replica.update_weights.remote(case.deliver(payload)))
        assert {"fetch_s", "apply_s", "total_s", "bytes"} <= set(timings)
        assert get(replica.weights_sha256.remote()) == get(case.trainer.digest.remote())
        updated: Completion = get(replica.generate.remote(PROMPT, GREEDY, "k-updated", "t", 1))
        assert updated.token_ids == reference["updated"].token_ids
        assert updated.logprobs == pytest.approx(reference["updated"].logprobs, abs=LOGPROB_TOLERANCE)
        assert updated.token_versions == [2] * GREEDY.max_tokens

        # stats count every token generated; spans hold every turn and the sync
        turns = [greedy, first[0][1], aborted, updated]
        stats = get(replica.stats.remote())
        assert set(stats) >= STATS_KEYS and stats["name"] == case.name and stats["running"] == 0
        assert stats["generated_tokens"] == sum(c.num_tokens for c in turns)
        assert stats["prompt_tokens"] == len(PROMPT) * len(turns)
        spans = get(replica.drain_spans.remote())
        generated = [s for s in spans if s["kind"] == "generate"]
        assert sorted(s["traj"] for s in generated) == ["k-greedy", "k-long", "k-short", "k-updated"]
        assert {s["traj"]: s["new_tokens"] for s in generated} == {
            "k-greedy": 8,
            "k-short": SHORT.max_tokens,
            "k-long": kept,
            "k-updated": 8,
        }
        assert all(s["t1"] >= s["t0"] for s in spans)
        assert [s["version"] for s in spans if s["kind"] == "sync"][-1] == 2
        assert get(replica.drain_spans.remote()) == []

        # an engine that died under a living actor: a turn and a ping raise rollarc's EngineDeadError, the type the
        # router fails over on and heal replaces on (regression: vLLM's own EngineDeadError was neither)
        if kind in KILLABLE:
            KILLABLE[kind](replica)
            with pytest.raises(EngineDeadError):
                get(replica.generate.remote(PROMPT, GREEDY, "k-dead", "t", 2))
            with pytest.raises(EngineDeadError):
                get(replica.ping.remote())
        get(replica.shutdown.remote())
    finally:
        ray.kill(replica)
        ray.kill(case.trainer)
