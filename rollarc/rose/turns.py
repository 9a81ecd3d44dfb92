"""A rollout turn as ROSE moves it between workers: what to generate, and what was generated so far.

A turn that is preempted or migrated keeps its partial output, log-probs and per-token versions; where it
resumes, its prompt is the original prompt plus that output (re-prefilled, or taken from the prefix cache
under ``traj_id``), and only the remaining tokens are generated. So a turn's tokens keep the policy version
that produced each of them, whichever worker produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rollarc.engine.types import FinishReason, SamplingParams

# Without the caller's sampling parameters (the benchmark's synthetic turns): sample, and generate them all.
DEFAULT_PARAMS = SamplingParams(temperature=1.0, max_tokens=1, ignore_eos=True)


@dataclass
class Turn:
    turn_id: str
    traj_id: str  # the cache key: the trajectory's next turn reuses this turn's KV where it ran
    prompt_ids: list[int]
    max_tokens: int
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    preemptions: int = 0
    migrations: int = 0
    workers: list[str] = field(default_factory=list)  # where it ran, in order
    params: SamplingParams | None = None  # the caller's sampling (temperature, stop ids, seed); max_tokens is ours
    finish_reason: FinishReason | None = None  # the engine's, once the turn is done ("stop", "length" or "error")
    error: str | None = None

    @property
    def remaining(self) -> int:
        return self.max_tokens - len(self.output_ids)

    @property
    def resume_prompt(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def sampling(self) -> SamplingParams:
        """The parameters of the next (or resumed) engine request: only the tokens still to generate."""
        return replace(self.params or DEFAULT_PARAMS, max_tokens=self.remaining)

    def extend(self, token_ids: list[int], logprobs: list[float], versions: list[int]) -> None:
        self.output_ids += token_ids
        self.logprobs += logprobs
        self.token_versions += versions
