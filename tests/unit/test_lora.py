"""LoRA (``model.lora``): the replica-side merge, the peft-wrapped trainer, PEFT-format adapters, config checks."""

from __future__ import annotations

import copy

import peft
import pytest
import torch
from transformers import AutoModelForCausalLM

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.algo.config import LossConfig
from rollarc.config import LoraConfig
from rollarc.config.io import ConfigError
from rollarc.models import load_policy
from rollarc.sync.lora import AdapterMerge, adapter_targets, merge_adapter
from rollarc.train.batch import build_batch
from rollarc.train.lora import adapter_state, apply_lora, load_adapter, merged_weights, save_adapter
from rollarc.train.policy_trainer import PolicyTrainer
from tests.integration.test_runtime import config
from tests.integration.test_weight_sync_and_failover import scripted_group

P = "base_model.model."


def test_merge_adapter_adds_scaled_b_times_a_to_the_base():
    base = {"m.q.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "m.k.weight": torch.ones(2, 2)}
    adapter = {
        P + "m.q.lora_A.weight": torch.tensor([[1.0, 0.0]]),  # r = 1, in = 2
        P + "m.q.lora_B.weight": torch.tensor([[2.0], [-1.0]]),  # out = 2
    }
    merged = merge_adapter(base, adapter, scaling=0.5)
    # B @ A = [[2, 0], [-1, 0]]; * 0.5 = [[1, 0], [-0.5, 0]]; + base
    assert list(merged) == ["m.q.weight"]
    assert torch.equal(merged["m.q.weight"], torch.tensor([[2.0, 2.0], [2.5, 4.0]]))


def test_adapter_targets_names_what_is_wrong():
    assert adapter_targets({P + "a.lora_A.weight": torch.ones(1), P + "a.lora_B.weight": torch.ones(1)}) == {
        "a.weight": (P + "a.lora_A.weight", P + "a.lora_B.weight")
    }
    with pytest.raises(ValueError, match="not a LoRA adapter tensor"):
        adapter_targets({"a.weight": torch.ones(1)})
    with pytest.raises(ValueError, match="but not"):
        adapter_targets({P + "a.lora_A.weight": torch.ones(1)})
    with pytest.raises(ValueError, match="1 lora_B matrices but 0"):
        adapter_targets({P + "a.lora_B.weight": torch.ones(1)})


def test_adapter_merge_keeps_only_the_adapted_base_and_refuses_other_targets():
    merge = AdapterMerge({"a.weight": torch.zeros(1, 1), "b.weight": torch.zeros(1, 1)}, scaling=2.0)
    one = {P + "a.lora_A.weight": torch.tensor([[3.0]]), P + "a.lora_B.weight": torch.tensor([[0.5]])}
    assert merge.merged(one) == {"a.weight": torch.tensor([[3.0]])}
    assert list(merge.base) == ["a.weight"]
    two = {P + "b.lora_A.weight": torch.tensor([[1.0]]), P + "b.lora_B.weight": torch.tensor([[1.0]])}
    with pytest.raises(KeyError, match=r"b\.weight"):
        merge.merged(two)


def lora_model(policy_dir, r=2, alpha=4.0, targets=("q_proj", "v_proj")):
    model, tok = load_policy(policy_dir)
    return apply_lora(model, LoraConfig(r=r, alpha=alpha, target_modules=list(targets)), seed=0), tok


def randomise_b(model: peft.PeftModel, seed: int = 1) -> None:
    """B starts at zero (the adapter is a no-op); give it values so merges are not trivially the base."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def test_only_adapters_train_and_the_replica_merge_equals_peft_merge_bitwise(nano_policy_dir):
    model, _ = lora_model(nano_policy_dir)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_A" in n or "lora_B" in n for n in trainable)
    layers = model.config.num_hidden_layers
    assert len(trainable) == layers * 2 * 2  # q_proj and v_proj, A and B each
    randomise_b(model)
    base, _ = load_policy(nano_policy_dir)
    replica = AdapterMerge(base.state_dict(), LoraConfig(r=2, alpha=4.0).scaling)
    merged = replica.merged(adapter_state(model))
    expected = merged_weights(model)
    assert len(merged) == layers * 2
    for name, tensor in merged.items():
        assert torch.equal(tensor, expected[name]), name
    assert not torch.equal(merged[next(iter(merged))], base.state_dict()[next(iter(merged))])


def test_a_target_that_matches_no_module_is_a_one_line_error(nano_policy_dir):
    model, _ = load_policy(nano_policy_dir)
    with pytest.raises(ValueError, match=r"\['qkv'\] match no linear layer") as err:
        apply_lora(model, LoraConfig(target_modules=["q_proj", "qkv"]), seed=0)
    assert "\n" not in str(err.value)


def test_adapter_saves_in_peft_format_and_loads_with_peft_and_back(nano_policy_dir, tmp_path):
    model, _ = lora_model(nano_policy_dir)
    randomise_b(model)
    save_adapter(model, tmp_path / "adapter")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    loaded = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(nano_policy_dir), tmp_path / "adapter")
    assert loaded.peft_config["default"].r == 2 and loaded.peft_config["default"].lora_alpha == 4.0
    for name, tensor in adapter_state(model).items():
        assert torch.equal(adapter_state(loaded)[name], tensor), name
    fresh, _ = lora_model(nano_policy_dir)
    load_adapter(fresh, tmp_path / "adapter")
    assert all(torch.equal(adapter_state(fresh)[n], t) for n, t in adapter_state(model).items())
    other, _ = lora_model(nano_policy_dir, targets=("q_proj",))
    with pytest.raises(ValueError, match=r"do not match model\.lora"):
        load_adapter(other, tmp_path / "adapter")


def test_lora_trainer_steps_only_the_adapter_and_publishes_only_it(nano_policy_dir):
    model, tok = lora_model(nano_policy_dir)
    base_before = {n: t.clone() for n, t in model.get_base_model().state_dict().items() if "lora_" not in n}
    trainer = PolicyTrainer(model, LossConfig(kl_coef=0.1), lr=0.05, pad_id=tok.pad_token_id, adapter=True)
    assert trainer.ref_model is None  # the reference is the base with adapters disabled, not a copy
    published = {n: t.clone() for n, t in trainer.named_weights().items()}  # on the CPU they alias the params
    assert all(n.startswith(P) and ("lora_A" in n or "lora_B" in n) for n in published)
    renderer = ChatRenderer(tok)
    prompt = renderer.prompt_ids([Message("user", "t0..")])
    stats = trainer.train_step([scripted_group(prompt, renderer)])
    assert stats["version"] == 1
    after = trainer.named_weights()
    assert any(not torch.equal(after[n], published[n]) for n in after if "lora_B" in n)
    for name, tensor in model.get_base_model().state_dict().items():
        if "lora_" not in name:
            assert torch.equal(tensor, base_before[name]), name  # the frozen base (its names: base_layer)


def test_kl_reference_is_the_base_model(nano_policy_dir):
    model, tok = lora_model(nano_policy_dir)
    randomise_b(model)
    trainer = PolicyTrainer(model, LossConfig(kl_coef=0.1), lr=0.0, pad_id=tok.pad_token_id, adapter=True)
    base, _ = load_policy(nano_policy_dir)
    plain = PolicyTrainer(copy.deepcopy(base), LossConfig(), lr=0.0, pad_id=tok.pad_token_id)
    renderer = ChatRenderer(tok)
    batch = build_batch([scripted_group(renderer.prompt_ids([Message("user", "t0..")]), renderer)], "grpo", 1e-6, 0)
    reference = trainer._reference_logprobs(batch)
    assert torch.allclose(reference, plain.logprobs(batch), atol=1e-6)
    assert not torch.allclose(trainer.logprobs(batch), reference, atol=1e-4)  # the adapter does change the policy


def test_config_reads_lora_and_refuses_what_it_cannot_run(nano_policy_dir, tmp_path):
    cfg = config(nano_policy_dir, tmp_path, model={"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj"]}})
    assert cfg.model.lora is not None and cfg.model.lora.scaling == 2.0
    assert config(nano_policy_dir, tmp_path).model.lora is None
    with pytest.raises(ConfigError, match=r"model\.lora runs on one unsharded train replica"):
        config(nano_policy_dir, tmp_path, model={"lora": {}}, train={"fsdp": {"on_one_replica": True}})
    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        config(nano_policy_dir, tmp_path, model={"lora": {"r": 0}})


def test_adapter_deltas_through_the_publisher_merge_like_full_copies(nano_policy_dir):
    """``sync.method: delta`` on adapter tensors: a receiver that applies v0 then the v0->v1 delta merges the
    same weights as peft on the trainer."""
    from rollarc.sync.config import SyncConfig
    from rollarc.sync.versions import WHOLE, WeightPublisher, WeightReceiver

    model, _ = lora_model(nano_policy_dir)
    publisher = WeightPublisher(SyncConfig(method="delta"))
    publisher.publish(adapter_state(model), version=0)
    receiver = WeightReceiver(WHOLE, state={}, version=None)
    receiver.apply(publisher.fetch(WHOLE, None))
    randomise_b(model)
    publisher.publish(adapter_state(model), version=1)
    (delta,) = publisher.latest(WHOLE)
    assert not delta.full and delta.base_version == 0
    receiver.apply((delta,))
    base, _ = load_policy(nano_policy_dir)
    merged = AdapterMerge(base.state_dict(), LoraConfig(r=2, alpha=4.0).scaling).merged(receiver.state)
    expected = merged_weights(model)
    assert all(torch.equal(tensor, expected[name]) for name, tensor in merged.items())


def test_preflight_names_a_lora_target_that_matches_no_layer(nano_policy_dir, tmp_path):
    from rollarc.train.preflight import PreflightError, check_lora_targets

    check_lora_targets(config(nano_policy_dir, tmp_path, model={"lora": {"target_modules": ["q_proj", "down_proj"]}}))
    bad = config(nano_policy_dir, tmp_path, model={"lora": {"target_modules": ["q_proj", "attn.c_attn"]}})
    with pytest.raises(PreflightError, match=r"\['attn\.c_attn'\] match no linear layer of the policy; it has \[") as e:
        check_lora_targets(bad)
    assert "\n" not in str(e.value) and "'down_proj'" in str(e.value)
    preset = bad.model_copy(update={"model": bad.model.model_copy(update={"path": None})})
    with pytest.raises(PreflightError, match="c_attn"):
        check_lora_targets(preset)  # a preset (no directory yet): checked on the preset's architecture


def test_eval_of_a_lora_checkpoint_merges_its_adapter(nano_policy_dir, tmp_path):
    import shutil

    from rollarc.models.checkpoint import checkpoint_adapter
    from rollarc.train.lora import merge_saved_adapter

    model, _ = lora_model(nano_policy_dir)
    randomise_b(model)
    shutil.copytree(nano_policy_dir, tmp_path / "step" / "policy")
    assert checkpoint_adapter(tmp_path / "step" / "policy") is None  # a plain policy directory
    save_adapter(model, tmp_path / "step" / "adapter")
    assert checkpoint_adapter(tmp_path / "step" / "policy") == tmp_path / "step" / "adapter"
    base, _ = load_policy(tmp_path / "step" / "policy")
    merged = merge_saved_adapter(base, tmp_path / "step" / "adapter").state_dict()
    expected = merged_weights(model)
    assert merged.keys() == expected.keys() and all(torch.equal(merged[n], t) for n, t in expected.items())
