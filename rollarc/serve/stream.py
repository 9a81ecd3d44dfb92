"""Streamed completions (``stream: true``) as server-sent events, both ways, as pure functions (no HTTP, no engine).

A stream is OpenAI's and vLLM's: ``data: {chunk}\\n\\n`` events, then ``data: [DONE]\\n\\n``. Each chunk's
``choices[0]`` carries what the non-streamed reply carries (:mod:`rollarc.serve.protocol`), for that chunk's new
tokens only: ``text``, ``token_ids`` (vLLM's ``return_token_ids``), ``logprobs`` (``tokens``,
``token_logprobs``, ``text_offset``), ``rollarc_token_versions``; ``finish_reason`` is null until the last one.
A failure after the stream started is one ``data: {"error": {...}}`` event, as vLLM sends it.

Why the rollout backend streams: a turn aborted mid-generation (an in-flight weight update, a cancelled
trajectory) keeps the tokens that reached it, as the in-process engines' aborts do; a non-streamed request
that is cancelled returns nothing.

Server side: :class:`ChunkWriter` and :class:`IncrementalText`. Client side: :class:`SSEDecoder` (bytes to event
payloads, bounded) and :class:`StreamAccumulator` (chunks to one :class:`Completion`, bounded by ``max_tokens``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rollarc.engine.types import Completion, FinishReason
from rollarc.serve.protocol import (
    FINISH_REASONS,
    ParsedRequest,
    ProtocolError,
    choice_tokens,
    logprobs_block,
    reply_version,
)

DONE = "[DONE]"
SSE_DONE = b"data: [DONE]\n\n"
MAX_EVENT_BYTES = 4 * 1024 * 1024  # one event holds a few tokens' worth of JSON; a server sending more is broken


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as JSON (one line: JSON escapes every newline)."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def sse_error(status: int, message: str, kind: str = "server_error") -> bytes:
    """The event for a failure after the stream started (vLLM's shape: ``{"error": {message, type, code}}``)."""
    return sse_event({"error": {"message": message, "type": kind, "code": status}})


# ---------------------------------------------------------------------------------------------- server side
class IncrementalText:
    """The text of a growing token sequence, a piece per call, never splitting a multi-byte character.

    Decoding token by token would cut a character whose bytes span two tokens; decoding the whole sequence at
    every step costs its length each time. As Hugging Face's ``TextStreamer`` does, it decodes a short window
    from the last emitted boundary and holds text back while it ends in U+FFFD (an unfinished character).
    """

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.prefix = 0  # start of the window re-decoded for context
        self.read = 0  # tokens whose text has been emitted

    def add(self, ids: Sequence[int]) -> str:
        """The new text that ``ids`` completes (possibly empty: held back until its character is whole)."""
        self.ids.extend(int(t) for t in ids)
        before = self.decode(self.ids[self.prefix : self.read])
        text = self.decode(self.ids[self.prefix :])
        if len(text) <= len(before) or text.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(before) :]

    def flush(self) -> str:
        """Whatever text is held back (the sequence has ended: an unfinished character stays U+FFFD)."""
        before = self.decode(self.ids[self.prefix : self.read])
        text = self.decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return text[len(before) :]


class ChunkWriter:
    """The chunks of one streamed completion: :meth:`tokens` after each engine step, :meth:`final` at the end."""

    def __init__(
        self,
        model: str,
        request: ParsedRequest,
        decode: Callable[[list[int]], str],
        piece: Callable[[int], str],
        created: int | None = None,
    ) -> None:
        self.model = model
        self.request = request
        self.text = IncrementalText(decode)
        self.piece = piece  # one token's text, for logprobs.tokens and text_offset as the non-streamed reply
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time()) if created is None else created
        self.sent = 0  # tokens already in a chunk
        self.offset = 0  # text_offset of the next token

    def tokens(self, ids: Sequence[int], logprobs: Sequence[float], versions: Sequence[int]) -> dict[str, Any]:
        """The chunk for tokens the engine sampled in its latest step (not finished yet)."""
        return self._chunk(ids, logprobs, versions, None, None, self.text.add(ids))

    def final(self, completion: Completion) -> dict[str, Any]:
        """The last chunk: the completion's tokens not sent yet (those of its finishing step) and why it ended."""
        at = self.sent
        ids = completion.token_ids[at:]
        text = self.text.add(ids) + self.text.flush()
        return self._chunk(
            ids,
            completion.logprobs[at:],
            completion.token_versions[at:],
            completion.finish_reason,
            completion.stop_reason,
            text,
            version=completion.version,
        )

    def _chunk(
        self,
        ids: Sequence[int],
        logprobs: Sequence[float],
        versions: Sequence[int],
        finish_reason: FinishReason | None,
        stop_reason: int | str | None,
        text: str,
        version: int | None = None,
    ) -> dict[str, Any]:
        self.sent += len(ids)
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "token_ids": list(ids),
            "rollarc_token_versions": list(versions),
            "logprobs": None,
        }
        if self.request.logprobs:
            pieces = [self.piece(t) for t in ids] if not self.request.tokens_as_ids else []
            choice["logprobs"] = logprobs_block(ids, logprobs, self.request, pieces, self.offset)
            self.offset += sum(len(p) for p in pieces)
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "rollarc_version": version if version is not None else min(versions, default=0),
        }


# ---------------------------------------------------------------------------------------------- client side
class SSEDecoder:
    """Server-sent events from a byte stream, fed as it arrives: :meth:`feed` returns each complete event's data.

    Lines end in ``\\n`` or ``\\r\\n``; ``data:`` lines of one event are joined by newlines, comments (``:``) and
    other fields are skipped. An event larger than ``max_event_bytes`` raises :class:`ProtocolError`, so a server
    that never ends a line cannot fill memory.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, raw: bytes) -> list[str]:
        self._buffer += raw
        events = []
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            line = line.removesuffix(b"\r")
            if not line:  # a blank line ends the event
                if self._data:
                    events.append(b"\n".join(self._data).decode("utf-8", errors="replace"))
                self._data, self._size = [], 0
            elif line.startswith(b"data:"):
                value = line[5:].removeprefix(b" ")
                self._data.append(value)
                self._size += len(value)
            self._check(self._size)
        self._check(self._size + len(self._buffer))
        return events

    def _check(self, size: int) -> None:
        if size > self.max_event_bytes:
            raise ProtocolError(f"the stream sent an event of more than {self.max_event_bytes} bytes")


class StreamAccumulator:
    """One turn's tokens as its chunks arrive; :meth:`completion` at the end of the stream, or with ``"abort"``
    when it was cut, holds every token received so far."""

    def __init__(self, prompt_len: int, request_id: str, fallback_version: int, max_tokens: int) -> None:
        self.prompt_len = prompt_len
        self.request_id = request_id
        self.fallback_version = fallback_version
        self.max_tokens = max_tokens
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.finish_reason: FinishReason | None = None
        self.stop_reason: int | str | None = None
        self.done = False  # data: [DONE] arrived

    def add(self, data: str) -> None:
        """One event's data: a chunk, an error (raises :class:`ProtocolError` with the server's message) or DONE."""
        if data == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise ProtocolError(f"the stream sent an event that is not JSON: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise ProtocolError("the stream sent an event that is not a JSON object")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ProtocolError(f"the server failed the stream: {str(message)[:500]}")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise ProtocolError("a streamed chunk has no choices list")
        if not choices:  # the usage chunk of stream_options.include_usage
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ProtocolError("a streamed chunk's choices[0] is not an object")
        if self.finish_reason is not None:
            raise ProtocolError("the stream sent a chunk after the one with finish_reason")
        ids, logprobs, versions = choice_tokens(choice, reply_version(chunk, self.fallback_version))
        if len(self.token_ids) + len(ids) > self.max_tokens:
            raise ProtocolError(f"the stream sent more than the {self.max_tokens} tokens asked for (max_tokens)")
        self.token_ids += ids
        self.logprobs += logprobs
        self.versions += versions
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = finish if finish in FINISH_REASONS else "stop"
            self.stop_reason = choice.get("stop_reason")

    def completion(self, finish_reason: FinishReason | None = None) -> Completion:
        """The turn so far; ``finish_reason`` overrides the server's (``"abort"`` for a stream cut by an abort)."""
        reason = finish_reason or self.finish_reason
        if reason is None:
            raise ProtocolError("the stream ended before a chunk with finish_reason")
        return Completion(
            request_id=self.request_id,
            prompt_len=self.prompt_len,
            token_ids=list(self.token_ids),
            logprobs=list(self.logprobs),
            token_versions=list(self.versions),
            version=min(self.versions, default=self.fallback_version),
            finish_reason=reason,
            stop_reason=None if finish_reason else self.stop_reason,
        )
