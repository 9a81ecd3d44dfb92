"""``rollarc bench lora``: the bytes it reports are the sync codec's, its LoRA side trains only adapters."""

from __future__ import annotations

from rollarc.agent.chat import ChatRenderer
from rollarc.bench.lora import CONFIG, demo_groups, measure
from rollarc.config import load_train_config
from rollarc.models import new_policy
from rollarc.sync.codec import full_nbytes
from rollarc.train.lora import adapter_state, apply_lora


def test_bench_lora_measures_the_adapter_against_the_whole_policy():
    cfg = load_train_config(CONFIG)
    assert cfg.model.lora is not None
    model, tok = new_policy(cfg.model.preset, cfg.model.max_position_embeddings, seed=cfg.model.init_seed)
    groups = demo_groups(cfg, ChatRenderer(tok), groups=1, size=2, seed=0)
    seg = groups[0][0].segments[0]
    replies = cfg.tasks[0].agent.max_tokens_per_turn
    assert [len(g) for g in groups] == [2] and sum(seg.assistant_mask) == replies  # a prompt, then one reply
    assert [t.reward for t in groups[0]] == [0.0, 1.0]  # a group with signal
    full, lora = measure(cfg, groups, steps=1)
    bucket = cfg.sync.bucket_bytes
    assert full["sync_bytes"] == full_nbytes(model.state_dict(), bucket_bytes=bucket)
    adapter = adapter_state(apply_lora(model, cfg.model.lora, cfg.seed))
    assert lora["sync_bytes"] == full_nbytes(adapter, bucket_bytes=bucket)
    # r x (in + out) per adapted layer, from the preset's shapes
    c = model.config
    h, i, kv = c.hidden_size, c.intermediate_size, c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    per_layer = {"q_proj": h + h, "k_proj": h + kv, "v_proj": h + kv, "o_proj": h + h}
    per_layer |= {"gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
    expected = cfg.model.lora.r * c.num_hidden_layers * sum(per_layer[t] for t in cfg.model.lora.target_modules)
    assert lora["trainable_params"] == expected == sum(t.numel() for t in adapter.values())
    assert full["trainable_params"] == full["params"] == lora["params"]
    assert lora["bit_exact"] is True
