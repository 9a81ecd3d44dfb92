"""ChatRenderer memoises rendered prompts: same ids as a fresh render, callers get their own list, bounded size."""

from __future__ import annotations

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.models import new_policy

_, TOKENIZER = new_policy("nano")


def test_cached_prompt_ids_equal_a_fresh_render_and_are_a_fresh_list():
    renderer = ChatRenderer(TOKENIZER)
    messages = [Message("user", "abcd")]
    first = renderer.prompt_ids(messages)
    assert first == TOKENIZER("<|user|>abcd<|end|><|assistant|>", add_special_tokens=False)["input_ids"]
    first.append(99)  # a caller extending its prompt must not change what the next rollout of the group gets
    assert renderer.prompt_ids(list(messages)) == first[:-1]


def test_the_cache_keeps_the_most_recent_conversations_only():
    renderer = ChatRenderer(TOKENIZER, cache_size=2)
    for word in ("ab", "cd", "ab", "ef"):
        renderer.prompt_ids([Message("user", word)])
    assert [key[0].content for key in renderer._cache] == ["ab", "ef"]  # "cd" was least recently used
    uncached = ChatRenderer(TOKENIZER, cache_size=0)
    assert uncached.prompt_ids([Message("user", "ab")]) == renderer.prompt_ids([Message("user", "ab")])
    assert not uncached._cache
