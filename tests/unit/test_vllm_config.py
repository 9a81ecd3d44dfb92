"""`rollout.backend: vllm`: what the config accepts and refuses."""

from __future__ import annotations

import pytest

from rollarc.config import load_train_config
from rollarc.config.io import ConfigError


def test_the_shipped_vllm_config_loads_with_every_in_flight_mode():
    for mode in ("finish", "abort", "continue"):
        cfg = load_train_config("configs/vllm.yaml", [f"async.in_flight_update={mode}"])
        assert cfg.rollout.backend == "vllm" and cfg.async_.in_flight_update == mode
        assert cfg.rollout.vllm.kv_cache_mb == 256 and cfg.rollout.vllm.enforce_eager is True


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.lora.r=1024", "above vLLM's largest max_lora_rank 512"),
        ("model.lora.target_modules=[q_proj,lm_head]", r"model.lora.target_modules \['lm_head'\] are not adapted"),
        ("rollout.vllm.kv_cache_mb=8", "kv_cache_mb"),
        ("rollout.vllm.max_model_len=4", "max_model_len"),
    ],
)
def test_what_the_vllm_backend_cannot_take_is_refused_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config("configs/vllm.yaml", [override])


def test_lora_loads_on_the_vllm_backend():
    cfg = load_train_config("configs/vllm.yaml", ["model.lora.r=4", "model.lora.target_modules=[q_proj,down_proj]"])
    assert cfg.model.lora is not None and cfg.model.lora.r == 4 and cfg.rollout.backend == "vllm"
