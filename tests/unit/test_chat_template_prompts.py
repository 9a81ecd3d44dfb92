"""Chat-message prompts go through the tokenizer's chat template (a locally built Qwen2-style one), and so do
plain-text prompts with template_plain_prompts; without a template, plain text (tests/unit/test_byo_parity.py:
plain-text prompts by default)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.engine.types import Completion, SamplingParams

# Qwen2-Instruct's chat template, verbatim.
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen2_style_tokenizer(path: Path, template: bool = True) -> PreTrainedTokenizerBase:
    """A byte-level BPE trained here on a few lines, with Qwen2's special tokens, saved and loaded back."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = ["You are a helpful assistant.", "What is 12+30? Answer with a number.", "Be brief.", "42 \\boxed{42}"]
    core.train_from_iterator(
        corpus * 20,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", clean_up_tokenization_spaces=False
    )
    if template:
        tokenizer.chat_template = QWEN2_TEMPLATE
    tokenizer.save_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


class Recorder:
    def __init__(self, renderer: ChatRenderer) -> None:
        self.renderer = renderer
        self.prompts: list[list[int]] = []

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        self.prompts.append(list(prompt_ids))
        ids = self.renderer.encode_reply("42")
        return Completion(cache_key, len(prompt_ids), ids, [0.0] * len(ids), [0] * len(ids), 0, "stop")


def first_prompt(tmp_path: Path, tokenizer: PreTrainedTokenizerBase, prompt: Any, **dataset: Any) -> list[int]:
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"prompt": prompt, "ground_truth": "42"})
        + "\n"
        + json.dumps({"prompt": prompt, "ground_truth": "42"})
        + "\n"
    )
    task = TaskConfig(
        name="d",
        dataset={
            "path": str(path),
            "ground_truth_column": "ground_truth",
            "reward": [{"function": "rollarc.data.math_reward:compute_score"}],
            **dataset,
        },
        agent=AgentConfig(max_tokens_per_turn=8),
    )
    renderer = ChatRenderer(tokenizer)
    engine = Recorder(renderer)

    async def go() -> None:
        runner = EpisodeRunner({"d": task}, renderer, engine, SamplingConfig(), max_env_threads=1)
        try:
            traj = await runner.run(EpisodeSpec("t", "d", 0))
            assert traj.status == "ok" and traj.success, traj.failure_reason
        finally:
            runner.close()

    asyncio.run(go())
    return engine.prompts[0]


def template_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids)


def test_chat_message_prompts_render_exactly_as_apply_chat_template(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12+30?"}]
    ids = first_prompt(tmp_path, tokenizer, messages)
    assert ids == template_ids(tokenizer, messages)
    text = tokenizer.decode(ids)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_plain_text_prompts_go_through_the_template_with_the_system_prompt(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok")
    ids = first_prompt(
        tmp_path, tokenizer, "What is 12+30?", system_prompt="Answer with a number.", template_plain_prompts=True
    )
    expected = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 12+30?"}]
    assert ids == template_ids(tokenizer, expected)
    # and without a system prompt the template's own default system message appears
    ids = first_prompt(tmp_path, tokenizer, "What is 12+30?", template_plain_prompts=True)
    assert tokenizer.decode(ids).startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")


def test_without_a_chat_template_the_prompt_is_the_plain_text(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok", template=False)
    assert tokenizer.chat_template is None
    ids = first_prompt(tmp_path, tokenizer, "What is 12+30?")
    assert ids == tokenizer("What is 12+30?", add_special_tokens=False)["input_ids"]
    ids = first_prompt(tmp_path, tokenizer, "What is 12+30?", system_prompt="Be brief.", template_plain_prompts=True)
    assert tokenizer.decode(ids) == "Be brief.\n\nWhat is 12+30?"


def test_a_tokenizer_without_an_eos_token_is_refused_in_one_line(tmp_path):
    tokenizer = qwen2_style_tokenizer(tmp_path / "tok", template=False)
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="no eos token"):
        ChatRenderer(tokenizer)
