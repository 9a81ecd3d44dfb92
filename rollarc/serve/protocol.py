"""The OpenAI completions wire format, both ways, as pure functions (no HTTP, no engine).

Client side (the ``openai`` rollout backend): :func:`completion_request` builds the JSON body for one turn,
:func:`parse_completion` turns the server's reply into the engine's :class:`Completion`. Server side
(``rollarc serve``): :func:`parse_request` and :func:`completion_response`. A streamed reply (``stream: true``)
carries the same fields per chunk, for that chunk's tokens: :mod:`rollarc.serve.stream`.

Token ids travel as vLLM does it: the prompt is a list of ints; the reply carries the sampled ids in
``choices[0].token_ids`` (vLLM's ``return_token_ids``) and, with ``return_tokens_as_token_ids``, as
``"token_id:N"`` strings in ``choices[0].logprobs.tokens``. Per-token log-probs are OpenAI's
``choices[0].logprobs.token_logprobs``. rollarc adds ``rollarc_version`` (the weight version of the reply)
and ``choices[0].rollarc_token_versions`` (the version of each token).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rollarc.engine.types import Completion, FinishReason, SamplingParams
from rollarc.serve.request_fields import (
    RequestError,
    bool_field,
    int_field,
    is_int,
    number_field,
    show,
    stop_field,
    token_ids_field,
)

TOKEN_ID_PREFIX = "token_id:"
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort")


class ProtocolError(ValueError):
    """A reply that lacks what a rollout needs (token ids, one finite log-prob per token)."""


# ---------------------------------------------------------------------------------------------- client side
def completion_request(
    model: str, prompt_ids: Sequence[int], params: SamplingParams, stream: bool = False
) -> dict[str, Any]:
    """The JSON body asking for one completion of ``prompt_ids`` with its token ids and log-probs (``stream``: as
    server-sent events, one chunk per batch of new tokens)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in prompt_ids],
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "n": 1,
        "logprobs": 0,  # the sampled token's log-prob, no alternatives
        "echo": False,
        "stream": stream,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    if params.top_k:
        body["top_k"] = params.top_k
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop_token_ids:
        body["stop_token_ids"] = list(params.stop_token_ids)
    if params.stop:
        body["stop"] = list(params.stop)
    if params.ignore_eos:
        body["ignore_eos"] = True
    return body


def parse_completion(body: dict[str, Any], prompt_len: int, request_id: str, fallback_version: int) -> Completion:
    """The engine-side record of a reply; ``fallback_version`` is used when the server reports none."""
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ProtocolError("reply has no choices[0]") from None
    if not isinstance(choice, dict):
        raise ProtocolError("reply's choices[0] is not an object")
    version = reply_version(body, fallback_version)
    token_ids, values, versions = choice_tokens(choice, version)
    finish = choice.get("finish_reason")
    finish_reason: FinishReason = finish if finish in FINISH_REASONS else "stop"
    return Completion(
        request_id=request_id,
        prompt_len=prompt_len,
        token_ids=token_ids,
        logprobs=values,
        token_versions=versions,
        version=min(versions, default=version),
        finish_reason=finish_reason,
        stop_reason=choice.get("stop_reason"),
    )


def reply_version(body: dict[str, Any], fallback: int) -> int:
    """The weight version a reply (or chunk) reports as ``rollarc_version``; ``fallback`` when it reports none."""
    version = body.get("rollarc_version", fallback)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProtocolError(f"reply's rollarc_version is not an integer: {str(version)[:40]}")
    return version


def choice_tokens(choice: dict[str, Any], version: int) -> tuple[list[int], list[float], list[int]]:
    """A reply's (or a streamed chunk's) ``choices[0]``: its token ids, their log-probs and versions (``version``
    for each when the server reports none); raises :class:`ProtocolError` when one is missing or malformed."""
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        raise ProtocolError("reply's choices[0].logprobs is not an object")
    token_ids = choice.get("token_ids")
    if token_ids is None:
        tokens = logprobs.get("tokens")
        if tokens is None or not all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
            raise ProtocolError(
                "reply has no token ids: neither choices[0].token_ids (return_token_ids) nor "
                "'token_id:N' strings in logprobs.tokens (return_tokens_as_token_ids)"
            )
        token_ids = [t[len(TOKEN_ID_PREFIX) :] for t in tokens]
    try:
        token_ids = [int(t) for t in token_ids]
    except (TypeError, ValueError):
        raise ProtocolError(f"reply has token ids that are not integers: {str(token_ids)[:80]}") from None
    values = logprobs.get("token_logprobs")
    if not isinstance(values, list) or len(values) != len(token_ids):
        raise ProtocolError(
            f"reply has {len(token_ids)} token ids but "
            f"{len(values) if isinstance(values, list) else 'no'} logprobs.token_logprobs"
        )
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ProtocolError("reply has a missing or non-finite entry in logprobs.token_logprobs")
    versions = choice.get("rollarc_token_versions")
    if versions is None:
        versions = [version] * len(token_ids)
    elif not isinstance(versions, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in versions):
        raise ProtocolError("reply's rollarc_token_versions is not a list of integers")
    if len(versions) != len(token_ids):
        raise ProtocolError(f"reply has {len(token_ids)} token ids but {len(versions)} rollarc_token_versions")
    return token_ids, [float(v) for v in values], versions


# ---------------------------------------------------------------------------------------------- server side
MAX_TEMPERATURE = 100.0
MIN_TEMPERATURE = 1e-2  # below it (but above 0, greedy), logits / T overflows float32 into NaN log-probs
MAX_SEED = 2**63 - 1
PROMPT_CHARS_PER_TOKEN = 32


@dataclass(frozen=True)
class RequestLimits:
    """What the served engine can take: its vocabulary, its length, and caps on the per-step stop checks.

    ``max_prompt_chars`` bounds a text prompt before it is tokenised (tokenising costs CPU in proportion to the
    length): by default ``PROMPT_CHARS_PER_TOKEN`` characters per token of ``max_model_len``.
    """

    vocab_size: int
    max_model_len: int
    max_stop_strings: int = 16
    max_stop_chars: int = 256
    max_stop_token_ids: int = 64
    max_prompt_chars: int | None = None

    @property
    def prompt_chars(self) -> int:
        return (
            self.max_prompt_chars if self.max_prompt_chars is not None else PROMPT_CHARS_PER_TOKEN * self.max_model_len
        )


@dataclass(frozen=True)
class ParsedRequest:
    prompt_ids: list[int]
    params: SamplingParams
    logprobs: bool
    tokens_as_ids: bool
    stream: bool = False  # answer with server-sent events (rollarc.serve.stream)


def parse_request(
    body: Any, served_model: str, tokenize: Callable[[str], list[int]], limits: RequestLimits
) -> ParsedRequest:
    """Validate a completions request, every field's type and range; raises :class:`RequestError` naming the field.

    A prompt must leave room for one generated token (fewer than ``max_model_len`` tokens: vLLM refuses
    longer ones too); ``max_tokens`` is at most ``max_model_len``, and generation that reaches
    ``max_model_len`` first ends there with finish_reason "length", as in the engine.
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", served_model)
    if model != served_model:
        raise RequestError(f"model {show(model)} is not served here (served: {served_model!r})")
    stream = bool_field(body, "stream")
    if bool_field(body, "echo"):
        raise RequestError("echo: true is not supported")
    n = body.get("n")
    if n is not None and not (is_int(n) and n == 1):
        raise RequestError(f"n must be 1 (or null), got {show(n)}")
    logprobs = body.get("logprobs")
    if logprobs is not None and not (is_int(logprobs) and 0 <= logprobs <= 1):
        raise RequestError(f"logprobs must be null, 0 or 1 (only the sampled token's log-prob), got {show(logprobs)}")
    temperature = number_field(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE, low_open=False)
    if 0.0 < temperature < MIN_TEMPERATURE:
        raise RequestError(
            f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], got {temperature!r}"
        )
    stop_token_ids = body.get("stop_token_ids")
    params = SamplingParams(
        temperature=temperature,
        top_p=number_field(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=max(0, int_field(body, "top_k", 0, -1, limits.vocab_size) or 0),  # vLLM's -1 means off too
        max_tokens=int_field(body, "max_tokens", 16, 1, limits.max_model_len) or 16,
        stop_token_ids=tuple(
            ()
            if stop_token_ids is None
            else token_ids_field(
                stop_token_ids, "stop_token_ids", limits.vocab_size, limits.max_stop_token_ids, allow_empty=True
            )
        ),
        stop=stop_field(body, limits.max_stop_strings, limits.max_stop_chars),
        seed=int_field(body, "seed", None, 0, MAX_SEED),
        ignore_eos=bool_field(body, "ignore_eos"),
    )
    bool_field(body, "return_token_ids")  # always returned; checked so that a bad value is not silently taken
    tokens_as_ids = bool_field(body, "return_tokens_as_token_ids")
    prompt_ids = _prompt_ids(body.get("prompt"), tokenize, limits)
    return ParsedRequest(prompt_ids, params, logprobs is not None, tokens_as_ids, stream)


def _prompt_ids(prompt: Any, tokenize: Callable[[str], list[int]], limits: RequestLimits) -> list[int]:
    """The prompt's token ids: token ids as sent, or a string tokenised (after the character cap)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    most = limits.max_model_len - 1  # room for one generated token
    if isinstance(prompt, str) and prompt:
        if len(prompt) > limits.prompt_chars:
            raise RequestError(
                f"prompt has {len(prompt)} characters, more than the {limits.prompt_chars} accepted "
                f"({PROMPT_CHARS_PER_TOKEN} per token of max_model_len={limits.max_model_len}); send fewer"
            )
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError("prompt must be valid Unicode text (it holds a lone surrogate)") from None
        ids = list(tokenize(prompt))
    elif isinstance(prompt, list) and prompt:
        ids = prompt
    else:
        raise RequestError("prompt must be a non-empty string or a non-empty list of token ids (one prompt)")
    if len(ids) > most:
        raise RequestError(
            f"prompt has {len(ids)} tokens; max_model_len={limits.max_model_len} leaves room for at most {most} "
            "(one token must be left to generate)"
        )
    return token_ids_field(ids, "prompt", limits.vocab_size, most, allow_empty=False)


def logprobs_block(
    ids: Sequence[int], logprobs: Sequence[float], request: ParsedRequest, token_strings: Sequence[str], offset: int
) -> dict[str, Any]:
    """OpenAI's ``choices[0].logprobs`` for ``ids``, whose text starts at character ``offset`` of the completion."""
    tokens = [f"{TOKEN_ID_PREFIX}{t}" for t in ids] if request.tokens_as_ids else list(token_strings)
    offsets, at = [], offset
    for piece in token_strings:
        offsets.append(at)
        at += len(piece)
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": None, "text_offset": offsets}


def completion_response(
    completion: Completion, request: ParsedRequest, model: str, text: str, token_strings: Sequence[str]
) -> dict[str, Any]:
    """The reply body for one finished completion (see the module docstring for the fields)."""
    ids = list(completion.token_ids)
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "finish_reason": completion.finish_reason,
        "stop_reason": completion.stop_reason,
        "token_ids": ids,
        "rollarc_token_versions": list(completion.token_versions),
        "logprobs": None,
    }
    if request.logprobs:
        choice["logprobs"] = logprobs_block(ids, completion.logprobs, request, token_strings, 0)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "rollarc_version": completion.version,
        "usage": {
            "prompt_tokens": completion.prompt_len,
            "completion_tokens": len(ids),
            "total_tokens": completion.prompt_len + len(ids),
        },
    }
