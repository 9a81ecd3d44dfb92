"""Tiny policies: presets, the character tokenizer and chat template, HF-format save/load round trips."""

from __future__ import annotations

import string

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.models import atomic_directory, count_parameters, load_policy, new_policy, save_policy
from rollarc.models.tokenizer import CHARACTERS


def test_tiny_preset_is_between_one_and_five_million_parameters():
    model, _ = new_policy("tiny")
    assert 1_000_000 <= count_parameters(model) <= 5_000_000
    assert model.config.model_type == "llama"


def test_tokenizer_round_trips_every_environment_character():
    _, tok = new_policy("nano")
    text = "".join(CHARACTERS) + "#_OX*P+ nums 3 7 <calc>3*7</calc>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one id per character
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids


def test_chat_template_matches_the_renderer_and_marks_turns():
    _, tok = new_policy("nano")
    renderer = ChatRenderer(tok)
    messages = [Message("system", "go"), Message("user", "ab"), Message("assistant", "U"), Message("user", "cd")]
    ids = renderer.prompt_ids(messages)
    assert tok.decode(ids) == "<|system|>go<|end|><|user|>ab<|end|><|assistant|>U<|end|><|user|>cd<|end|><|assistant|>"
    assert ids[-1] == tok.convert_tokens_to_ids("<|assistant|>")
    assert renderer.encode_reply("U") == [tok.convert_tokens_to_ids("U"), tok.eos_token_id]
    assert renderer.reply_text(renderer.encode_reply(" R ")) == "R"


def test_hf_save_load_round_trip(tmp_path):
    model, tok = new_policy("nano", max_position_embeddings=128, seed=3)
    save_policy(model, tok, tmp_path / "p")
    auto_model = AutoModelForCausalLM.from_pretrained(tmp_path / "p")
    auto_tok = AutoTokenizer.from_pretrained(tmp_path / "p")
    text = "<|user|>" + string.ascii_letters + "<|end|><|assistant|>"
    assert auto_tok(text)["input_ids"] == tok(text)["input_ids"]
    ids = torch.tensor([tok(text)["input_ids"]])
    assert torch.equal(model(ids).logits, auto_model(ids).logits)
    loaded, loaded_tok = load_policy(tmp_path / "p")
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert loaded_tok.chat_template == tok.chat_template


def test_same_seed_same_weights_different_seed_different():
    a, _ = new_policy("nano", seed=1)
    b, _ = new_policy("nano", seed=1)
    c, _ = new_policy("nano", seed=2)
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_load_policy_rejects_a_non_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an HF-format model directory"):
        load_policy(tmp_path)


def test_atomic_directory_keeps_the_old_copy_when_writing_fails(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("half-written")
        raise RuntimeError("crash while writing")
    assert (target / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary left behind
