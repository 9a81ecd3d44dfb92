"""A synced adapter written as a PEFT adapter directory for vLLM: the bits, the config, the rank vLLM gets."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rollarc.config.model import LoraConfig
from rollarc.serve.vllm_lora import vllm_lora_problems, vllm_max_lora_rank
from rollarc.sync.lora_dir import remove_adapter_dirs, write_adapter_dir

A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
B = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"


def adapter(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {A: torch.randn(2, 8, generator=gen), B: torch.randn(8, 2, generator=gen)}


def test_the_directory_holds_the_tensors_bitwise_and_peft_config(tmp_path):
    lora = LoraConfig(r=2, alpha=4.0, target_modules=["q_proj", "k_proj"])
    sent = adapter(0)
    path = write_adapter_dir(tmp_path, 3, sent, lora, "/policy")
    assert path == tmp_path / "v3"
    read = load_file(str(path / "adapter_model.safetensors"))
    assert read.keys() == sent.keys() and all(torch.equal(read[k], sent[k]) for k in sent)
    config = json.loads((path / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["target_modules"]) == (2, 4.0, ["k_proj", "q_proj"])
    assert config["peft_type"] == "LORA" and config["use_rslora"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v3"]  # no temporary directory left behind


def test_a_version_written_again_is_replaced_whole_and_old_versions_are_removed(tmp_path):
    lora = LoraConfig(r=2, alpha=4.0)
    for version in (1, 2, 3):
        write_adapter_dir(tmp_path, version, adapter(version), lora, "/policy")
    again = write_adapter_dir(tmp_path, 3, adapter(9), lora, "/policy")
    assert torch.equal(load_file(str(again / "adapter_model.safetensors"))[A], adapter(9)[A])
    removed = remove_adapter_dirs(tmp_path, {tmp_path / "v2", tmp_path / "v3"})
    assert removed == [tmp_path / "v1"] and sorted(p.name for p in tmp_path.iterdir()) == ["v2", "v3"]


def test_a_tensor_that_is_not_an_adapter_matrix_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a LoRA adapter tensor"):
        write_adapter_dir(tmp_path, 1, {"model.norm.weight": torch.ones(3)}, LoraConfig(), "/policy")


@pytest.mark.parametrize("r,rank", [(1, 1), (2, 8), (8, 8), (9, 16), (300, 320), (512, 512)])
def test_the_rank_vllm_is_started_with_is_the_smallest_it_accepts_that_holds_r(r, rank):
    assert vllm_max_lora_rank(r) == rank


def test_what_vllm_lora_cannot_apply_is_named():
    assert vllm_lora_problems(8, ["q_proj", "gate_proj"]) == []
    (rank,) = vllm_lora_problems(513, ["q_proj"])
    assert "513" in rank and "512" in rank
    (targets,) = vllm_lora_problems(8, ["lm_head", "q_proj", "embed_tokens"])
    assert "['embed_tokens', 'lm_head']" in targets
