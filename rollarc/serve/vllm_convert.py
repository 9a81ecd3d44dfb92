"""rollarc's request and result types to and from vLLM's: pure functions, testable without vLLM.

- **Log-probs.** The engine is built with ``logprobs_mode="processed_logprobs"`` and each request asks for
  ``logprobs=0``: vLLM then reports, for every sampled token, its log-probability under the distribution it was
  sampled from (after temperature, top-k and top-p), which is what rollarc's engine reports and what the
  importance ratio needs. The default (``raw_logprobs``) would report the untempered model's.
- **Versions.** vLLM 0.32 labels each engine step's output with the engine's weight version
  (``update_weight_version``, set only while generation is paused) and returns the spans on the final output
  (``CompletionOutput.weight_versions``): the version of every token, exactly, without a race against the
  output stream. rollarc's versions are integers; they travel as their decimal strings.
- **EOS.** The engine is built without a tokenizer (rollarc's token ids go in and out), so vLLM knows no EOS id:
  the model's EOS ids are passed as stop tokens unless the request ignores EOS, as rollarc's engine adds them.
- **Seeds.** vLLM's seeded sampler cannot skip draws, so a resumed turn (``skip_draws`` > 0) gets a seed derived
  from its own and the draws it skips: its continuation is reproducible and not a replay of the first draws.
  Only rollarc's engine resumes draw for draw (``SamplingParams.skip_draws``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollarc.engine.types import Completion, FinishReason, SamplingParams

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort", None: "abort"}


def resumed_seed(seed: int, skip_draws: int) -> int:
    """The seed of a turn resumed after ``skip_draws`` tokens (``skip_draws`` 0: the seed itself)."""
    return seed if skip_draws == 0 else (seed * 1_000_003 + skip_draws) % (2**63 - 1)


def sampling_kwargs(params: SamplingParams, eos_ids: Sequence[int]) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for ``params`` (``output_kind`` is the caller's)."""
    if params.stop:
        raise ValueError(
            "rollout.backend: vllm runs the engine without a tokenizer: stop strings are not supported "
            f"(got stop={params.stop!r}); use stop_token_ids"
        )
    stop_ids = list(params.stop_token_ids)
    if not params.ignore_eos:
        stop_ids += [t for t in eos_ids if t not in stop_ids]
    return {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_tokens": params.max_tokens,
        "stop_token_ids": stop_ids,
        "ignore_eos": True,  # EOS is among stop_token_ids when it should stop a turn
        "seed": None if params.seed is None else resumed_seed(params.seed, params.skip_draws),
        "logprobs": 0,
        "detokenize": False,
    }


def sampled_logprobs(request_id: str, token_ids: Sequence[int], entries: Sequence[Any] | None) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position maps (token id -> ``Logprob``)."""
    logprobs = [float(entry[token].logprob) for entry, token in zip(entries or [], token_ids, strict=False)]
    if len(logprobs) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(token_ids)} tokens of {request_id}")
    return logprobs


def token_versions(spans: Sequence[Any] | None, delivered: Sequence[int]) -> list[int]:
    """Per-token versions: vLLM's ``WeightVersionSpan``s (``version``, ``start``, ``end``) where they cover
    every token, else the replica's version when each token was delivered (``delivered``).

    vLLM returns spans on a request's final output when it finishes; an aborted request's final output has
    none. Delivery stamps are exact whenever no update happened while the tokens were in flight, which holds
    for every abort: ``in_flight_update: abort`` aborts before the new version is set.
    """
    if spans and spans[0].start == 0 and spans[-1].end >= len(delivered):
        versions = list(delivered)
        for span in spans:
            for i in range(span.start, min(span.end, len(delivered))):
                versions[i] = int(span.version)
        return versions
    return list(delivered)


def completion_of(
    request_id: str,
    prompt_len: int,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    versions: Sequence[int],
    finish_reason: str | None,
    stop_reason: int | str | None,
    current_version: int,
    times: tuple[float, float | None, float],
) -> Completion:
    """A rollarc ``Completion``; ``times``: arrival, first token (None: none) and finish, perf_counter seconds."""
    arrival, first_token, finish = times
    return Completion(
        request_id=request_id,
        prompt_len=prompt_len,
        token_ids=[int(t) for t in token_ids],
        logprobs=list(logprobs),
        token_versions=list(versions),
        version=min(versions) if versions else current_version,
        finish_reason=_FINISH.get(finish_reason, "abort"),
        stop_reason=stop_reason,
        arrival_time=arrival,
        first_token_time=first_token,
        finish_time=finish,
    )
