"""Streamed completions (``rollarc.serve.stream``): server-sent events built and parsed by hand, and ``rollarc serve``
streaming in process (no Ray): the chunks add up to the non-streamed reply, and a client that leaves mid-stream
aborts its request in the engine (nothing left running).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rollarc.engine.types import Completion, SamplingParams
from rollarc.serve.protocol import ParsedRequest, ProtocolError
from rollarc.serve.stream import (
    SSE_DONE,
    ChunkWriter,
    IncrementalText,
    SSEDecoder,
    StreamAccumulator,
    sse_error,
    sse_event,
)
from tests.unit.test_serve_request_validation import http

WAIT_S = 60.0


def utf8(ids: list[int]) -> str:
    """A byte-level tokenizer's decode: token id = one byte."""
    return bytes(ids).decode("utf-8", errors="replace")


def vllm_chunk(ids: list[int], logprobs: list[float], finish: str | None = None, **choice: Any) -> str:
    """A chunk as vLLM's server streams it with return_token_ids and logprobs=0 (no rollarc fields)."""
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "text": "x" * len(ids),
                    "logprobs": {
                        "tokens": [f"token_id:{t}" for t in ids],
                        "token_logprobs": logprobs,
                        "top_logprobs": [None] * len(ids),
                        "text_offset": list(range(len(ids))),
                    },
                    "finish_reason": finish,
                    "stop_reason": None,
                    "token_ids": ids,
                    **choice,
                }
            ],
        }
    )


# ---------------------------------------------------------------------------------------------- events
def test_the_decoder_finds_events_however_the_bytes_are_split() -> None:
    wire = (
        b": keep-alive comment\n\n"
        + sse_event({"a": 1})
        + b'event: message\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'  # CRLF lines, one event's data on two lines
        + SSE_DONE
    )
    for size in [1, 2, 5, len(wire)]:
        decoder = SSEDecoder()
        events = [e for i in range(0, len(wire), size) for e in decoder.feed(wire[i : i + size])]
        assert events == ['{"a":1}', '{"b":\n2}', "[DONE]"]


def test_the_decoder_refuses_an_event_over_its_cap() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    assert decoder.feed(b"data: 0123456789\n\n") == ["0123456789"]
    with pytest.raises(ProtocolError, match="an event of more than 10 bytes"):
        decoder.feed(b"data: 0123456789A")  # a line that never ends is refused before it does
    with pytest.raises(ProtocolError, match="more than 10 bytes"):
        SSEDecoder(max_event_bytes=10).feed(b"data: 012345\ndata: 012345\n")  # nor do two lines add up past it


# ---------------------------------------------------------------------------------------------- client side
def test_a_vllm_stream_accumulates_to_one_completion() -> None:
    turn = StreamAccumulator(prompt_len=3, request_id="r", fallback_version=7, max_tokens=8)
    turn.add(vllm_chunk([], [], prompt_token_ids=[1, 2, 3]))  # vLLM's first chunk may carry only the prompt ids
    turn.add(vllm_chunk([11, 12], [-0.5, -1.25]))
    turn.add(json.dumps({"id": "cmpl-1", "choices": [], "usage": {"completion_tokens": 3}}))  # include_usage
    turn.add(vllm_chunk([13], [-2.0], finish="length"))
    turn.add("[DONE]")
    assert turn.done
    got = turn.completion()
    assert (got.token_ids, got.logprobs, got.token_versions) == ([11, 12, 13], [-0.5, -1.25, -2.0], [7, 7, 7])
    assert (got.finish_reason, got.version, got.prompt_len, got.request_id) == ("length", 7, 3, "r")


def test_an_aborted_stream_keeps_the_tokens_received() -> None:
    turn = StreamAccumulator(prompt_len=2, request_id="r", fallback_version=0, max_tokens=50)
    turn.add(json.dumps({"choices": [{"token_ids": [4, 5], "rollarc_token_versions": [3, 4],
                                      "logprobs": {"token_logprobs": [-0.1, -0.2]}, "finish_reason": None}],
                         "rollarc_version": 3}))  # fmt: skip
    with pytest.raises(ProtocolError, match="ended before a chunk with finish_reason"):
        turn.completion()  # the stream was cut: no finish_reason, so only an abort may end it
    aborted = turn.completion("abort")
    assert (aborted.token_ids, aborted.logprobs, aborted.token_versions) == ([4, 5], [-0.1, -0.2], [3, 4])
    assert (aborted.finish_reason, aborted.version, aborted.stop_reason) == ("abort", 3, None)
    empty = StreamAccumulator(prompt_len=2, request_id="r", fallback_version=9, max_tokens=5).completion("abort")
    assert (empty.token_ids, empty.version, empty.finish_reason) == ([], 9, "abort")


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (['{"error": {"message": "engine died", "type": "server_error", "code": 503}}'], "failed the stream: engine died"),
        (["not json"], "not JSON"),
        (["[1, 2]"], "not a JSON object"),
        (['{"object": "text_completion"}'], "no choices list"),
        ([vllm_chunk([1, 2, 3, 4], [-1.0] * 4)], "more than the 3 tokens asked for"),
        ([vllm_chunk([1], [-1.0], finish="stop"), vllm_chunk([2], [-1.0])], "a chunk after the one with finish_reason"),
        ([vllm_chunk([1, 2], [-1.0])], "2 token ids but 1 logprobs.token_logprobs"),
        ([vllm_chunk([1], [None])], "non-finite entry"),
        ([json.dumps({"choices": [{"text": "a", "logprobs": None}]})], "no token ids"),
        ([json.dumps({"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": [-1]}}], "rollarc_version": "1"})],
         "rollarc_version is not an integer"),
    ],
)  # fmt: skip
def test_a_bad_stream_fails_the_turn_naming_what_is_wrong(events: list[str], message: str) -> None:
    turn = StreamAccumulator(prompt_len=1, request_id="r", fallback_version=0, max_tokens=3)
    with pytest.raises(ProtocolError, match=message):
        for data in events:
            turn.add(data)


# ---------------------------------------------------------------------------------------------- server side
def test_incremental_text_never_splits_a_character() -> None:
    text = IncrementalText(utf8)
    e_acute = list("é".encode())  # two bytes, two tokens
    assert [text.add([ord("a")]), text.add(e_acute[:1]), text.add([*e_acute[1:], ord("b")])] == ["a", "", "éb"]
    assert text.add(list("€".encode())[:2]) == "" and text.flush() == "\ufffd"  # the stream ended mid-character
    assert text.flush() == ""


def test_chunks_built_by_the_writer_parse_back_to_the_completion() -> None:
    request = ParsedRequest([1, 2], SamplingParams(max_tokens=5), logprobs=True, tokens_as_ids=False, stream=True)
    writer = ChunkWriter("m", request, utf8, lambda t: utf8([t]), created=5)
    done = Completion("e", 2, [104, 105, 33, 63], [-0.5, -1.0, -1.5, -2.0], [0, 0, 1, 1], 0, "stop", stop_reason=63)
    first = writer.tokens([104, 105], [-0.5, -1.0], [0, 0])
    second = writer.tokens([33], [-1.5], [1])
    last = writer.final(done)  # the finishing step's token came only with the completion
    assert [c["choices"][0]["text"] for c in (first, second, last)] == ["hi", "!", "?"]
    assert [c["choices"][0]["token_ids"] for c in (first, second, last)] == [[104, 105], [33], [63]]
    assert [c["choices"][0]["logprobs"]["text_offset"] for c in (first, second, last)] == [[0, 1], [2], [3]]
    assert [c["choices"][0]["logprobs"]["tokens"] for c in (first, second, last)] == [["h", "i"], ["!"], ["?"]]
    assert [c["choices"][0]["finish_reason"] for c in (first, second, last)] == [None, None, "stop"]
    assert [c["rollarc_version"] for c in (first, second, last)] == [0, 1, 0]
    assert {c["id"] for c in (first, second, last)} == {writer.id} and last["created"] == 5

    wire = b"".join(sse_event(c) for c in (first, second, last)) + SSE_DONE
    turn = StreamAccumulator(prompt_len=2, request_id="e", fallback_version=-1, max_tokens=5)
    for data in SSEDecoder().feed(wire):
        turn.add(data)
    assert turn.done and turn.completion() == Completion(
        "e", 2, done.token_ids, done.logprobs, done.token_versions, 0, "stop", stop_reason=63
    )


def test_token_ids_as_strings_and_an_error_event() -> None:
    request = ParsedRequest([1], SamplingParams(), logprobs=True, tokens_as_ids=True, stream=True)
    chunk = ChunkWriter("m", request, utf8, lambda t: utf8([t])).tokens([104], [-0.5], [2])
    assert chunk["choices"][0]["logprobs"] == {
        "tokens": ["token_id:104"],
        "token_logprobs": [-0.5],
        "top_logprobs": None,
        "text_offset": [],
    }
    assert SSEDecoder().feed(sse_error(503, "engine was shut down")) == [
        '{"error":{"message":"engine was shut down","type":"server_error","code":503}}'
    ]


# ---------------------------------------------------------------------------------------------- rollarc serve
@pytest.fixture(scope="module")
def server(nano_policy_dir: Path) -> Any:
    from rollarc.engine.config import EngineConfig
    from rollarc.serve.app import CompletionServer

    instance = CompletionServer(str(nano_policy_dir), "rollarc", 4, EngineConfig(max_num_seqs=4, num_threads=1))
    yield instance
    instance.engine.shutdown()


async def stream_events(server: Any, body: dict[str, Any], keep: int | None = None) -> list[str]:
    """The events of a streamed reply; with ``keep``, the client leaves after that many chunks."""
    response = await server.completions(http(json.dumps({**body, "stream": True})))
    assert response.media_type == "text/event-stream"
    decoder, events = SSEDecoder(), []
    async for raw in response.body_iterator:
        events += decoder.feed(raw if isinstance(raw, bytes) else raw.encode())
        if keep is not None and len(events) >= keep:
            await response.body_iterator.aclose()  # what the server does with a client that disconnected
            break
    return events


def test_served_stream_adds_up_to_the_unstreamed_reply(server: Any) -> None:
    body = {"prompt": [5, 17, 33], "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 0}
    whole = json.loads(asyncio.run(asyncio.wait_for(server.completions(http(json.dumps(body))), WAIT_S)).body)
    events = asyncio.run(asyncio.wait_for(stream_events(server, body), WAIT_S))
    assert events[-1] == "[DONE]"  # (chunks come per engine step: the next test reads two before the end)
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    choice = whole["choices"][0]
    assert [t for c in chunks for t in c["token_ids"]] == choice["token_ids"] and len(choice["token_ids"]) == 12
    streamed = [v for c in chunks for v in c["logprobs"]["token_logprobs"]]
    assert streamed == choice["logprobs"]["token_logprobs"]
    assert [v for c in chunks for v in c["rollarc_token_versions"]] == [4] * 12
    assert "".join(c["text"] for c in chunks) == choice["text"]
    assert [c["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]


def test_steps_a_slow_reader_missed_come_as_one_chunk(server: Any) -> None:
    body = {"prompt": [5, 17, 33], "max_tokens": 40, "temperature": 0, "ignore_eos": True, "stream": True}

    async def read() -> list[list[int]]:
        response = await server.completions(http(json.dumps(body)))
        events = response.body_iterator
        first = json.loads((await anext(events))[len(b"data: ") :])
        before = server.engine.stats()["generated_tokens"]
        while server.engine.stats()["generated_tokens"] < before + 5:  # the reader idles while the engine steps
            await asyncio.sleep(0.001)
        rest = [json.loads(e) for raw in [x async for x in events] for e in SSEDecoder().feed(raw) if e != "[DONE]"]
        return [first["choices"][0]["token_ids"]] + [c["choices"][0]["token_ids"] for c in rest]

    chunks = asyncio.run(asyncio.wait_for(read(), WAIT_S))
    assert sum(len(c) for c in chunks) == 40
    assert len(chunks[1]) >= 5  # the five steps that passed unread are one chunk


def test_a_client_that_leaves_mid_stream_aborts_its_request(server: Any) -> None:
    before = server.engine.stats()["abort"]
    body = {"prompt": [5, 17, 33], "max_tokens": 250, "temperature": 0, "ignore_eos": True}
    events = asyncio.run(asyncio.wait_for(stream_events(server, body, keep=2), WAIT_S))
    assert len(events) == 2 and all(json.loads(e)["choices"][0]["finish_reason"] is None for e in events)
    deadline = time.monotonic() + WAIT_S  # the abort reaches the engine at its next step
    engine = server.engine
    while (engine.stats()["abort"] == before or engine._watchers or engine._streamed) and time.monotonic() < deadline:
        time.sleep(0.01)
    stats = server.engine.stats()
    assert stats["abort"] == before + 1 and stats["running"] == 0 and stats["waiting"] == 0
    assert server._unfinished() == 0
    assert server.engine._watchers == {} and server.engine._streamed == {}  # nothing kept for the gone stream


def test_a_stream_on_a_dead_engine_is_one_error_event(nano_policy_dir: Path) -> None:
    from rollarc.engine.config import EngineConfig
    from rollarc.serve.app import CompletionServer

    instance = CompletionServer(str(nano_policy_dir), "rollarc", 0, EngineConfig(num_threads=1))
    instance.engine.shutdown()
    events = asyncio.run(asyncio.wait_for(stream_events(instance, {"prompt": [5, 17], "max_tokens": 2}), WAIT_S))
    assert events == ['{"error":{"message":"engine was shut down","type":"server_error","code":503}}', "[DONE]"]
