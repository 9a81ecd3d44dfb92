"""Render a conversation to token ids, turn by turn, with any HF chat template.

Token-in, token-out: the trajectory's token ids are the ids the engine generated, never a re-tokenised
copy of the decoded text. Each new prompt is rendered from the messages with the tokenizer's own chat
template; when the previous segment (prompt + generated reply) is a prefix of the new prompt, only the
new tail is appended, so a full-history conversation is one sequence whose assistant tokens are exactly
the sampled ones. When it is not a prefix (a sliding history window, or a template that renders
assistant turns differently from what was generated), a new segment starts. Both cases train
correctly; the first also lets the engine reuse the cached KV of the earlier turns.

A tokenizer without a chat template (a base model) gets the plain format TRL uses for plain-text
prompts: the messages' contents as they are, joined by a blank line, with no role markers and no
generation prompt. For a single-turn dataset task that is the prompt text itself (after the system
prompt, if one is set). ``prompt_ids(messages, plain=True)`` renders that plain format whatever the
tokenizer: a dataset task's plain-text prompts go to the model as they are, as TRL does (TRL templates
only conversational prompts), unless ``dataset.template_plain_prompts`` is set.

Tools: ``prompt_ids(messages, tools=schemas)`` passes the tools' JSON schemas (OpenAI function format) to
the chat template as ``tools=``, as transformers documents for tool use, and ``tool``-role messages carry
their results. A template that never mentions ``tool`` cannot render that role: there each tool message
becomes a user message holding the result (the model still sees it, in the one role it knows).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

PLAIN_SEPARATOR = "\n\n"  # between messages when the tokenizer has no chat template


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class ChatRenderer:
    """Turns message lists into prompt ids and model replies into text.

    Rendered prompts are memoised (``cache_size`` most recent conversations): the ``G`` rollouts of a GRPO
    group start from the same observation, so their first prompt is rendered (Jinja template, then
    tokenised) once per group, not once per rollout.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, cache_size: int = 1024):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token; rollarc needs one to end a reply")
        self.tokenizer = tokenizer
        self.templated = tokenizer.chat_template is not None
        # a template naming no "tool" has no tool role (nor tools=): tool results go as user messages there
        self.tool_role = self.templated and "tool" in str(tokenizer.chat_template)
        self.eos_token_id: int = tokenizer.eos_token_id
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[Message | bool | str, ...], tuple[int, ...]] = OrderedDict()

    def prompt_ids(
        self, messages: list[Message], plain: bool = False, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The ids of the whole conversation so far, ending with the assistant generation prompt (none when
        ``plain``: then the messages' contents joined as they are, with no chat template). ``tools``: the
        JSON schemas of the tools the model may call, for the chat template."""
        key: tuple[Message | bool | str, ...] = (*messages, plain, json.dumps(tools, sort_keys=True))
        ids = self._cache.get(key)
        if ids is None:
            ids = tuple(self._render(messages, plain, tools))
            if self.cache_size > 0:
                self._cache[key] = ids
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return list(ids)

    def _render(self, messages: list[Message], plain: bool, tools: list[dict[str, Any]] | None) -> list[int]:
        if self.templated and not plain:
            shown = [m if m.role != "tool" or self.tool_role else Message("user", m.content) for m in messages]
            schemas: list[dict[Any, Any] | Callable[..., Any]] | None = list(tools) if tools else None
            rendered = self.tokenizer.apply_chat_template(
                [m.as_dict() for m in shown], tools=schemas, add_generation_prompt=True, tokenize=False
            )
        else:
            rendered = PLAIN_SEPARATOR.join(m.content for m in messages)
        return self.tokenizer(rendered, add_special_tokens=False)["input_ids"]

    def reply_text(self, token_ids: list[int]) -> str:
        """The assistant's text without the end-of-turn token, as the environment should see it."""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        assert isinstance(text, str)  # one sequence of ids decodes to one string
        return text.strip()

    def encode_reply(self, text: str) -> list[int]:
        """Ids of a demonstration reply, ending with the end-of-turn token (used for SFT)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos_token_id]
