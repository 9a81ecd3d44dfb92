"""The trajectory record: what one agent episode produced, from birth to gradient.

A trajectory is a list of segments. A segment is one token sequence the model saw, with a per-token
assistant mask (environment text is never trained on), the behaviour log-prob and the policy version
of every generated token. With full history there is one segment; a sliding history window starts a
new segment whenever the prompt stops extending the previous one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "failed", "aborted"]
NO_VERSION = -1  # version recorded for tokens the policy did not generate


@dataclass
class Segment:
    token_ids: list[int] = field(default_factory=list)
    assistant_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def extend_context(self, token_ids: list[int]) -> None:
        """Append prompt/environment tokens (not trained on)."""
        self.token_ids += token_ids
        self.assistant_mask += [0] * len(token_ids)
        self.logprobs += [0.0] * len(token_ids)
        self.versions += [NO_VERSION] * len(token_ids)

    def extend_generated(self, token_ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        """Append tokens the policy sampled, with their behaviour log-probs and versions."""
        if not (len(token_ids) == len(logprobs) == len(versions)):
            raise ValueError("generated tokens, log-probs and versions must have equal lengths")
        self.token_ids += token_ids
        self.assistant_mask += [1] * len(token_ids)
        self.logprobs += logprobs
        self.versions += versions

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class Trajectory:
    traj_id: str
    task: str
    seed: int
    group_id: str = ""
    segments: list[Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    model_reward: float | None = None  # score of a model-based reward, when one is configured
    success: bool = False
    num_turns: int = 0
    invalid_actions: int = 0
    tool_calls: int = 0  # tool calls the env ran or refused (a dataset task's info['tool_calls'])
    tool_errors: int = 0  # of which ended in an error message to the model (info['tool_errors'])
    finish: str = ""  # terminated | truncated | max_turns | context_limit
    status: Status = "ok"
    failure_reason: str | None = None  # the whole message, e.g. "env step 2: RuntimeError: boom"
    failure_kind: str | None = None  # what to count it under, e.g. "env_step_error:RuntimeError" (see failures.py)
    worker: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    cached_tokens: int = 0
    resumed_turns: int = 0  # turns interrupted (weight update, withdrawn replica) and resumed from partial output
    resumed_tokens: int = 0  # tokens those turns kept from their interrupted attempts
    # per turn, for online task profiles (what the cost model and simulator consume)
    turn_prompt_tokens: list[int] = field(default_factory=list)
    turn_new_tokens: list[int] = field(default_factory=list)
    turn_env_s: list[float] = field(default_factory=list)

    @property
    def versions(self) -> list[int]:
        return [v for seg in self.segments for v in seg.versions if v != NO_VERSION]

    @property
    def min_version(self) -> int:
        """The oldest policy version among the trajectory's generated tokens (NO_VERSION if none)."""
        versions = self.versions
        return min(versions) if versions else NO_VERSION

    @property
    def max_version(self) -> int:
        versions = self.versions
        return max(versions) if versions else NO_VERSION

    @property
    def num_tokens(self) -> int:
        return sum(len(seg) for seg in self.segments)

    def fail(self, reason: str, kind: str = "other") -> Trajectory:
        self.status = "failed"
        self.failure_reason = reason
        self.failure_kind = kind
        return self


def batch_digest(trajectories: Iterable[Trajectory]) -> str:
    """A short hash of every token id of a batch, in order: equal digests mean token-identical batches."""
    digest = hashlib.blake2b(digest_size=8)
    for traj in trajectories:
        for seg in traj.segments:
            digest.update(str(seg.token_ids).encode())
    return digest.hexdigest()
