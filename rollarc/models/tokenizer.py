"""A character-level tokenizer that covers every environment's text, with a chat template.

Why character-level: the environments speak in grids, digits and short keywords, so a vocabulary of
printable ASCII (plus newline) covers all of it with ~100 ids and no training. It is built with the HF
``tokenizers`` library and wrapped as a ``PreTrainedTokenizerFast``, so ``AutoTokenizer`` loads it and
``apply_chat_template`` renders the same token ids that rollarc's agent loop builds turn by turn.

Chat format (one special token per boundary keeps prompts short)::

    <|system|>...<|end|><|user|>...<|end|><|assistant|>...<|end|>

``<|end|>`` is the end-of-turn and end-of-sequence token.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD, UNK, SYSTEM, USER, ASSISTANT, END = "<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, UNK, SYSTEM, USER, ASSISTANT, END]
ROLE_TOKENS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}

CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable + "\n"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT],
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
