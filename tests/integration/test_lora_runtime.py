"""LoRA on local Ray: replicas receive only the adapter, run exactly the trainer's merged weights, and a PEFT
checkpoint resumes into the same weights."""

from __future__ import annotations

import filecmp

import peft
import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.models import load_policy, load_tokenizer
from rollarc.runtime.ray_cluster import start_ray, stop_ray
from rollarc.runtime.workers import Workers
from rollarc.sync.codec import full_nbytes
from rollarc.train.lora import adapter_state, apply_lora
from tests.integration.test_runtime import config
from tests.integration.test_weight_sync_and_failover import scripted_group

pytestmark = pytest.mark.slow


def assert_same(engine: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert engine.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(engine[name], tensor), name


def test_lora_syncs_only_the_adapter_bit_exact_and_resumes_from_its_peft_checkpoint(nano_policy_dir, tmp_path):
    cfg = config(nano_policy_dir, tmp_path, model={"lora": {"r": 2, "alpha": 4.0}}, train={"lr": 0.05})
    assert cfg.model.lora is not None
    base = AutoModelForCausalLM.from_pretrained(nano_policy_dir).state_dict()
    model, _ = load_policy(nano_policy_dir)
    adapter_bytes = full_nbytes(adapter_state(apply_lora(model, cfg.model.lora, 0)), bucket_bytes=cfg.sync.bucket_bytes)
    ck = tmp_path / "ck"
    start_ray(cfg.cluster)
    try:
        w = Workers(cfg, str(nano_policy_dir))
        replica = w.rollout["rollout-0"]
        # it caught up to the trainer's fresh adapter (B = 0), so it runs the base itself
        assert_same(ray.get(replica.engine_weights.remote()), base)
        renderer = ChatRenderer(load_tokenizer(nano_policy_dir))
        group = scripted_group(renderer.prompt_ids([Message("user", "t0..")]), renderer)
        for step in range(2):
            ray.get(w.trainer.train_step.remote([group], step))
        payload = ray.get(w.trainer.publish.remote())
        assert payload.version == 2
        assert payload.nbytes == adapter_bytes  # the adapter, and nothing of the base
        assert payload.nbytes * 10 < full_nbytes(base, bucket_bytes=cfg.sync.bucket_bytes)
        (report,) = ray.get(w.sync_all(payload))
        assert report["bytes"] == payload.nbytes
        merged = ray.get(w.trainer.gathered_weights.remote())  # peft's merge_and_unload on the trainer
        engine = ray.get(replica.engine_weights.remote())
        assert_same(engine, merged)
        assert not torch.equal(
            merged["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"]
        )
        ray.get(w.trainer.save_checkpoint.remote(str(ck), {"version": 2}))
    finally:
        stop_ray()  # reaps the cluster's processes (left to exit alone, they held up the next start)
    # policy/ is the base, byte for byte; adapter/ is PEFT's format and peft merges it into the same weights
    assert filecmp.cmp(nano_policy_dir / "model.safetensors", ck / "policy" / "model.safetensors", shallow=False)
    loaded = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(ck / "policy"), ck / "adapter")
    assert_same(loaded.merge_and_unload().state_dict(), merged)
    start_ray(cfg.cluster)
    try:
        resumed = Workers(cfg, str(ck / "policy"), start_version=2, checkpoint=str(ck))
        assert ray.get(resumed.trainer.version.remote()) == 2
        assert_same(ray.get(resumed.rollout["rollout-0"].engine_weights.remote()), merged)
    finally:
        stop_ray()  # reaps the cluster's processes (left to exit alone, they held up the next start)
