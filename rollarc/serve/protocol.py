"""The OpenAI completions wire format, both ways, as pure functions (no HTTP, no engine).

Client side (the ``openai`` rollout backend): :func:`completion_request` builds the JSON body for one turn,
:func:`parse_completion` turns the server's reply into the engine's :class:`Completion`. Server side
(``rollarc serve``): :func:`parse_request` and :func:`completion_response`.

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

TOKEN_ID_PREFIX = "token_id:"
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort")


class ProtocolError(ValueError):
    """A reply that lacks what a rollout needs (token ids, one finite log-prob per token)."""


class RequestError(ValueError):
    """A request the server cannot serve; the message names the field (HTTP 400)."""


# ---------------------------------------------------------------------------------------------- client side
def completion_request(model: str, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
    """The JSON body asking for one completion of ``prompt_ids`` with its token ids and log-probs."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in prompt_ids],
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "n": 1,
        "logprobs": 0,  # the sampled token's log-prob, no alternatives
        "echo": False,
        "stream": False,
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
    logprobs = choice.get("logprobs") or {}
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
        raise ProtocolError(f"reply has token ids that are not integers: {token_ids[:5]}") from None
    values = logprobs.get("token_logprobs")
    if values is None or len(values) != len(token_ids):
        raise ProtocolError(
            f"reply has {len(token_ids)} token ids but "
            f"{'no' if values is None else len(values)} logprobs.token_logprobs"
        )
    if any(v is None or not math.isfinite(float(v)) for v in values):
        raise ProtocolError("reply has a missing or non-finite entry in logprobs.token_logprobs")
    version = int(body.get("rollarc_version", fallback_version))
    versions = choice.get("rollarc_token_versions")
    versions = [version] * len(token_ids) if versions is None else [int(v) for v in versions]
    if len(versions) != len(token_ids):
        raise ProtocolError(f"reply has {len(token_ids)} token ids but {len(versions)} rollarc_token_versions")
    finish = choice.get("finish_reason")
    finish_reason: FinishReason = finish if finish in FINISH_REASONS else "stop"
    return Completion(
        request_id=request_id,
        prompt_len=prompt_len,
        token_ids=token_ids,
        logprobs=[float(v) for v in values],
        token_versions=versions,
        version=min(versions, default=version),
        finish_reason=finish_reason,
        stop_reason=choice.get("stop_reason"),
    )


# ---------------------------------------------------------------------------------------------- server side
@dataclass(frozen=True)
class ParsedRequest:
    prompt_ids: list[int]
    params: SamplingParams
    logprobs: bool
    tokens_as_ids: bool


def parse_request(body: dict[str, Any], served_model: str, tokenize: Callable[[str], list[int]]) -> ParsedRequest:
    """Validate a completions request; raises :class:`RequestError` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", served_model)
    if model != served_model:
        raise RequestError(f"model {model!r} is not served here (served: {served_model!r})")
    if body.get("stream"):
        raise RequestError("stream: true is not supported; send stream: false")
    if body.get("echo"):
        raise RequestError("echo: true is not supported")
    if int(body.get("n", 1)) != 1:
        raise RequestError(f"n must be 1, got {body.get('n')!r}")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        prompt_ids = tokenize(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt_ids = list(prompt)
    else:
        raise RequestError("prompt must be a non-empty string or a non-empty list of token ids (one prompt)")
    logprobs = body.get("logprobs")
    if logprobs is not None and not (isinstance(logprobs, int) and 0 <= logprobs <= 1):
        raise RequestError(f"logprobs must be null, 0 or 1 (only the sampled token's log-prob), got {logprobs!r}")
    stop = body.get("stop") or ()
    try:
        params = SamplingParams(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            top_k=max(0, int(body.get("top_k", 0) or 0)),  # vLLM's -1 means off too
            max_tokens=int(body.get("max_tokens", 16)),
            stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=None if body.get("seed") is None else int(body["seed"]),
            ignore_eos=bool(body.get("ignore_eos", False)),
        )
    except (TypeError, ValueError) as err:
        raise RequestError(str(err)) from None
    return ParsedRequest(prompt_ids, params, logprobs is not None, bool(body.get("return_tokens_as_token_ids", False)))


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
        tokens = [f"{TOKEN_ID_PREFIX}{t}" for t in ids] if request.tokens_as_ids else list(token_strings)
        offsets, at = [], 0
        for piece in token_strings:
            offsets.append(at)
            at += len(piece)
        choice["logprobs"] = {
            "tokens": tokens,
            "token_logprobs": list(completion.logprobs),
            "top_logprobs": None,
            "text_offset": offsets,
        }
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
