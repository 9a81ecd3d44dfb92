"""A single-turn plugin task for rollarc: reply with the prompt's word reversed.

The shortest kind of RL work, the kind TRL's ``GRPOTrainer`` is built for: the prompt is one random
word of 4–8 lowercase letters, the reply at most 8 letters and the end-of-turn token (a completion of at
most 9 tokens with rollarc's character tokenizer), one turn per episode. ``rollarc bench step`` uses it
(``configs/short_task.yaml``) to measure per-step overhead rather than model maths.

Reward: 1 for the exact reversal; otherwise the fraction of positions right, halved (a graded signal
that a GRPO group can rank), and ``invalid_penalty`` for a reply that is not lowercase letters. The
solver (``expert_action``) is the reversal itself, for the SFT warm start.

It is a plain ``gymnasium.Env`` with ``Text`` spaces (the plugin contract, docs/environments.md)::

    {entry_point: "reverse_word_env:ReverseWordEnv", kwargs: {min_len: 4, max_len: 8}}
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium.spaces import Text

CHARSET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")


class ReverseWordEnv(gymnasium.Env[str, str]):
    """One turn: the observation is a word, the action should be that word reversed."""

    instructions = "Reverse the word. Reply with the reversed word only."

    def __init__(self, min_len: int = 4, max_len: int = 8, invalid_penalty: float = -0.1) -> None:
        if not 1 <= min_len <= max_len:
            raise ValueError(f"ReverseWordEnv needs 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
        self.min_len, self.max_len, self.invalid_penalty = min_len, max_len, invalid_penalty
        self.observation_space = Text(max_length=max_len, min_length=0, charset=CHARSET)
        self.action_space = Text(max_length=64, min_length=0, charset=CHARSET)
        self._word = ""
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        length = int(self.np_random.integers(self.min_len, self.max_len + 1))
        self._word = "".join(chr(ord("a") + int(i)) for i in self.np_random.integers(0, 26, size=length))
        self._done = False
        return self._word, {"turn": 0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("ReverseWordEnv.step() called after the episode ended; call reset()")
        self._done = True
        reply, target = action.strip(), self._word[::-1]
        invalid = not (reply.isascii() and reply.isalpha() and reply.islower())
        if invalid:
            reward = self.invalid_penalty
        elif reply == target:
            reward = 1.0
        else:
            reward = 0.5 * sum(a == b for a, b in zip(reply, target, strict=False)) / len(target)
        info = {"turn": 1, "invalid_action": invalid, "success": reply == target}
        return "", float(reward), True, False, info

    def expert_action(self) -> str | None:
        return None if self._done else self._word[::-1]
