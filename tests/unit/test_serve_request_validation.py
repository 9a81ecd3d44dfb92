"""`rollarc serve`'s request checks: every field's type and range (HTTP 400 naming it), and who may call.

A request's values reach the engine's decode loop, where one bad value used to kill the loop for everyone
(`"stop": [5]` made every later request 503). Hand-written cases pin each field's message; a hypothesis test
feeds malformed JSON-like bodies and asserts that `parse_request` either returns values the engine can run
or raises `RequestError`, never anything else.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.engine.params_check import params_problem
from rollarc.serve.access import AccessError, ServerAccess, key_digest
from rollarc.serve.protocol import MAX_SEED, ParsedRequest, RequestError, RequestLimits, parse_request

VOCAB, MAX_LEN = 100, 32
LIMITS = RequestLimits(vocab_size=VOCAB, max_model_len=MAX_LEN)


def tokenize(text: str) -> list[int]:
    return [ord(ch) % VOCAB for ch in text]


def parse(**fields: Any) -> ParsedRequest:
    return parse_request({"prompt": [1, 2], **fields}, "rollarc", tokenize, LIMITS)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"stop": [5]}, "stop must hold non-empty strings of at most 256 characters, got 5"),
        ({"stop": 5}, "stop must be a string or a list of at most 16 strings, got 5"),
        ({"stop": [""]}, "stop must hold non-empty strings"),
        ({"stop": ["x"] * 17}, "stop must be a string or a list of at most 16 strings"),
        ({"stop": ["x" * 257]}, "stop must hold non-empty strings of at most 256 characters"),
        (
            {"stop_token_ids": [VOCAB]},
            "stop_token_ids must hold integer token ids in [0, 100) (the vocabulary), got [100]",
        ),
        ({"stop_token_ids": [-1]}, "stop_token_ids must hold integer token ids in [0, 100)"),
        ({"stop_token_ids": 3}, "stop_token_ids must be a list of token ids"),
        ({"stop_token_ids": list(range(65))}, "stop_token_ids holds 65 token ids, more than the 64 allowed"),
        ({"top_k": 2**70}, f"top_k must be an integer in [-1, {VOCAB}], got {2**70}"),
        ({"top_k": VOCAB + 1}, f"top_k must be an integer in [-1, {VOCAB}]"),
        ({"top_k": -2}, "top_k must be an integer in [-1, 100], got -2"),
        ({"top_k": 1.5}, "top_k must be an integer"),
        ({"top_k": True}, "top_k must be an integer"),
        ({"seed": 2**70}, f"seed must be an integer in [0, {MAX_SEED}], got {2**70}"),
        ({"seed": -1}, "seed must be an integer in [0, "),
        ({"seed": "1"}, "seed must be an integer"),
        ({"top_p": 0}, "top_p must be a number in (0, 1], got 0"),
        ({"top_p": 1.5}, "top_p must be a number in (0, 1]"),
        ({"top_p": "0.5"}, "top_p must be a number"),
        ({"temperature": math.nan}, "temperature must be a number in [0, 100], got nan"),
        ({"temperature": math.inf}, "temperature must be a number in [0, 100], got inf"),
        ({"temperature": 10**400}, "temperature must be a number in [0, 100]"),
        ({"temperature": -1}, "temperature must be a number in [0, 100], got -1"),
        ({"temperature": 1e-30}, "temperature must be 0 (greedy) or in [0.01, 100], got 1e-30"),
        ({"temperature": False}, "temperature must be a number"),
        ({"max_tokens": 0}, f"max_tokens must be an integer in [1, {MAX_LEN}], got 0"),
        ({"max_tokens": MAX_LEN + 1}, f"max_tokens must be an integer in [1, {MAX_LEN}], got {MAX_LEN + 1}"),
        ({"max_tokens": 4.0}, "max_tokens must be an integer"),
        ({"n": 2}, "n must be 1 (or null), got 2"),
        ({"n": "1"}, "n must be 1 (or null), got '1'"),
        ({"logprobs": 5}, "logprobs must be null, 0 or 1"),
        ({"logprobs": True}, "logprobs must be null, 0 or 1"),
        ({"stream": "no"}, "stream must be true or false, got 'no'"),
        ({"echo": 1}, "echo must be true or false, got 1"),
        ({"ignore_eos": "true"}, "ignore_eos must be true or false"),
        ({"return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids must be true or false"),
        ({"return_token_ids": "yes"}, "return_token_ids must be true or false"),
        ({"model": ["x"] * 500}, "model <list> is not served here"),
        ({"prompt": [VOCAB]}, "prompt must hold integer token ids in [0, 100) (the vocabulary), got [100]"),
        ({"prompt": [-1, 2]}, "prompt must hold integer token ids in [0, 100)"),
        ({"prompt": [1, True]}, "prompt must hold integer token ids"),
        ({"prompt": [1] * MAX_LEN}, f"prompt has {MAX_LEN} tokens; max_model_len={MAX_LEN} leaves room for at most 31"),
        ({"prompt": "x" * (32 * MAX_LEN + 1)}, "prompt has 1025 characters, more than the 1024 accepted"),
        ({"prompt": "a\ud800"}, "prompt must be valid Unicode text"),
        ({"prompt": None}, "prompt must be a non-empty string or a non-empty list"),
        ({"prompt": ""}, "prompt must be a non-empty string or a non-empty list"),
        ({"prompt": {"a": 1}}, "prompt must be a non-empty string or a non-empty list"),
    ],
)
def test_each_bad_field_is_refused_with_a_message_naming_it(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse(**fields)
    assert message in str(caught.value)


def test_a_body_that_is_not_an_object_is_refused() -> None:
    for body in ([1], "x", None, 3):
        with pytest.raises(RequestError, match="the request body must be a JSON object"):
            parse_request(body, "rollarc", tokenize, LIMITS)


def test_in_range_values_are_taken_as_sent() -> None:
    parsed = parse(
        stop="ab",
        stop_token_ids=[0, VOCAB - 1],
        top_k=-1,
        seed=MAX_SEED,
        top_p=1,
        temperature=0.01,
        max_tokens=MAX_LEN,
        n=None,
        logprobs=None,
        ignore_eos=None,
    )
    params = parsed.params
    assert (params.stop, params.stop_token_ids, params.top_k, params.seed) == (("ab",), (0, VOCAB - 1), 0, MAX_SEED)
    assert (params.top_p, params.temperature, params.max_tokens, params.ignore_eos) == (1.0, 0.01, MAX_LEN, False)
    assert parse(top_k=VOCAB, stop=["a", "b"]).params.top_k == VOCAB
    assert parse(prompt=[0] * (MAX_LEN - 1)).prompt_ids == [0] * (MAX_LEN - 1)
    assert parse(n=1, temperature=0).params.greedy


# ---------------------------------------------------------------------------------------------- hypothesis
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["rollarc", "other"]),
    "prompt": st.lists(st.integers(-2, VOCAB + 1), max_size=MAX_LEN + 1) | st.text(max_size=40),
    "max_tokens": st.integers(-1, MAX_LEN + 2),
    "temperature": st.floats(-1, 200),
    "top_p": st.floats(-0.5, 1.5),
    "top_k": st.integers(-3, VOCAB + 3) | st.integers(2**62, 2**65),
    "seed": st.integers(-5, 2**65),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3) | st.integers(), max_size=18),
    "stop_token_ids": st.lists(st.integers(-2, VOCAB + 2), max_size=4),
    "n": st.sampled_from([None, 1, 2, 0, "1", True]),
    "logprobs": st.sampled_from([None, 0, 1, 2, True]),
    "stream": st.sampled_from([None, False, True, "false"]),
    "echo": st.sampled_from([None, False, True, 0]),
    "ignore_eos": st.sampled_from([None, False, True, "yes"]),
    "return_tokens_as_token_ids": st.sampled_from([None, False, True, 1]),
}
BODIES = st.one_of(
    JSON,
    st.fixed_dictionaries({}, optional={k: v | JSON for k, v in PLAUSIBLE.items()}),
    st.fixed_dictionaries(  # a good prompt, so that the other fields decide
        {"prompt": st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=MAX_LEN - 1)},
        optional={k: v for k, v in PLAUSIBLE.items() if k not in ("prompt", "model")},
    ),
)


def assert_runnable(parsed: ParsedRequest) -> None:
    """Every value is one the engine accepts and can decode with."""
    params = parsed.params
    assert parsed.prompt_ids and len(parsed.prompt_ids) < MAX_LEN
    assert all(type(t) is int and 0 <= t < VOCAB for t in parsed.prompt_ids)
    assert params_problem(params) is None
    assert 0 <= params.top_k <= VOCAB and 0 < params.top_p <= 1 and 1 <= params.max_tokens <= MAX_LEN
    assert params.temperature == 0 or 0.01 <= params.temperature <= 100
    assert params.seed is None or 0 <= params.seed <= MAX_SEED
    assert all(type(t) is int and 0 <= t < VOCAB for t in params.stop_token_ids)
    assert len(params.stop) <= 16 and all(type(s) is str and 0 < len(s) <= 256 for s in params.stop)
    assert type(params.ignore_eos) is bool and type(parsed.logprobs) is bool and type(parsed.tokens_as_ids) is bool
    assert type(parsed.stream) is bool


@settings(max_examples=400, deadline=None)
@given(BODIES)
def test_any_body_parses_to_runnable_values_or_raises_request_error(body: Any) -> None:
    try:
        parsed = parse_request(body, "rollarc", tokenize, LIMITS)
    except RequestError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert_runnable(parsed)


# ---------------------------------------------------------------------------------------------- access
def test_api_key_is_required_once_set_and_compared_exactly() -> None:
    open_server = ServerAccess()
    open_server.check_key(None)
    keyed = ServerAccess.build("s3cret", 1024, None)
    assert keyed.api_key_sha256 == key_digest("s3cret") and "s3cret" not in repr(keyed)
    keyed.check_key("Bearer s3cret")
    for header in [None, "", "s3cret", "Bearer s3cre", "Bearer s3cret ", "bearer s3cret", "Basic s3cret"]:
        with pytest.raises(AccessError, match="missing or wrong API key") as caught:
            keyed.check_key(header)
        assert caught.value.status == 401


def test_body_size_cap() -> None:
    access = ServerAccess.build(None, 100, None)
    access.check_size(100)
    access.check_length("100")
    access.check_length(None)
    for declared in ["101", " 5000 "]:
        with pytest.raises(AccessError, match=r"request body over 100 bytes \(the server's --max-body-bytes\)") as e:
            access.check_length(declared)
        assert e.value.status == 413
    with pytest.raises(AccessError):
        access.check_size(101)
    with pytest.raises(ValueError, match="--max-body-bytes must be >= 1"):
        ServerAccess.build(None, 0, None)


def test_reloads_are_refused_without_a_reload_dir_and_outside_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "handoff", tmp_path / "secret"
    (root / "v1").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    with pytest.raises(AccessError, match="reloads are disabled on this server: start rollarc serve with --reload-dir"):
        ServerAccess().reload_target(str(root / "v1"))
    access = ServerAccess.build(None, 1024, str(root))
    assert access.reload_target(str(root / "v1")) == (root / "v1").resolve()
    assert access.reload_target("v1") == (root / "v1").resolve()  # relative: under the reload directory
    for path in [str(outside), str(root / ".." / "secret"), str(root / "escape"), "../secret", "/etc"]:
        with pytest.raises(AccessError) as caught:
            access.reload_target(path)
        assert caught.value.status == 403 and str(caught.value) == (
            "model_path is outside the server's --reload-dir; refused"
        )
    for bad in [None, 5, "", "a\x00b"]:
        with pytest.raises(AccessError) as caught:
            access.reload_target(bad)
        assert caught.value.status == 400
    with pytest.raises(ValueError, match=r"--reload-dir .*: not a directory"):
        ServerAccess.build(None, 1024, str(tmp_path / "missing"))


# ---------------------------------------------------------------------------------------------- the deployment
def http(body: bytes | str, headers: dict[str, str] | None = None) -> Any:
    """A starlette request as Ray Serve's proxy hands it to the ingress (no network, no Ray)."""
    from starlette.requests import Request

    data = body.encode() if isinstance(body, str) else body
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw, "query_string": b""}, receive)


@pytest.fixture(scope="module")
def server(nano_policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from rollarc.engine.config import EngineConfig
    from rollarc.serve.app import CompletionServer

    reload_dir = tmp_path_factory.mktemp("reload")
    access = ServerAccess.build("k", 4096, str(reload_dir))
    instance = CompletionServer(str(nano_policy_dir), "rollarc", 0, EngineConfig(max_num_seqs=4, num_threads=1), access)
    yield instance
    instance.engine.shutdown()


KEY = {"authorization": "Bearer k"}


def call(handler: Any, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    import asyncio
    import json

    response = asyncio.run(asyncio.wait_for(handler(http(body, KEY if headers is None else headers)), 120))
    return response.status_code, json.loads(response.body)


def test_the_server_answers_poison_with_4xx_and_then_still_serves(server: Any) -> None:
    """Before: after one `"stop": [5]` every later request got 503 (the engine loop had died)."""
    poison = [
        ('{"prompt": [1, 2], "stop": [5]}', 400, "stop must hold non-empty strings"),
        ('{"prompt": [1, 2], "top_k": 100000000000000000000000}', 400, "top_k must be an integer in [-1, "),
        ('{"prompt": [1, 2], "seed": 100000000000000000000000}', 400, "seed must be an integer in [0, "),
        ('{"prompt": [1, 100000]}', 400, "prompt must hold integer token ids in [0, "),
        ('{"prompt": [1, 2], "n": null, "max_tokens": null}', 200, None),
        ('{"prompt": [1, 2], "temperature": NaN}', 400, "temperature must be a number in [0, 100], got nan"),
        ("{not json", 400, "the request body is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, 413, "request body over 4096 bytes"),
        ("[" * 1500 + "]" * 1500, 400, "the request body is not valid JSON"),  # too deep for json's recursion
        (b'{"prompt": "\xff"}', 400, "the request body is not valid JSON"),
        ('{"prompt": "' + "x" * 4000 + '"}', 400, "prompt has 4000 tokens; max_model_len=256"),
        ('{"prompt": [' + ",".join(["1"] * 300) + "]}", 400, "leaves room for at most"),
    ]
    for body, status, message in poison:
        got, reply = call(server.completions, body)
        assert got == status, (body[:40], reply)
        if message is not None:
            assert message in reply["error"]["message"], reply
    got, reply = call(server.completions, '{"prompt": [1, 2], "max_tokens": 3, "temperature": 0}')
    assert got == 200 and len(reply["choices"][0]["token_ids"]) == 3 and reply["rollarc_version"] == 0
    server.check_health()


def test_the_api_key_is_required(server: Any) -> None:
    body = '{"prompt": [1, 2], "max_tokens": 1}'
    for headers in [{}, {"authorization": "Bearer wrong"}]:
        got, reply = call(server.completions, body, headers)
        assert got == 401 and "missing or wrong API key" in reply["error"]["message"]
        assert call(server.reload, '{"model_path": "x"}', headers)[0] == 401
    assert call(server.completions, body)[0] == 200


def test_a_reload_outside_the_reload_dir_is_refused_without_echoing_the_path(
    server: Any, nano_policy_dir: Path
) -> None:
    before = server.digest
    got, reply = call(server.reload, f'{{"model_path": "{nano_policy_dir}", "version": 7}}')
    assert got == 403 and reply == {
        "success": False,
        "message": "model_path is outside the server's --reload-dir; refused",
        "rollarc_version": 0,
    }
    got, reply = call(server.update_weights_from_disk, '{"model_path": "missing", "version": 1e400}')
    assert got == 400 and "version must be an integer" in reply["message"]
    assert server.engine.version == 0 and server.digest == before


def test_check_health_raises_on_a_dead_engine(nano_policy_dir: Path) -> None:
    """Ray Serve calls `check_health` and replaces a replica whose engine is gone (before: no such method)."""
    from rollarc.engine.async_engine import EngineDeadError
    from rollarc.engine.config import EngineConfig
    from rollarc.serve.app import CompletionServer

    instance = CompletionServer(str(nano_policy_dir), "rollarc", 0, EngineConfig(num_threads=1))
    instance.check_health()
    instance.engine.shutdown()
    with pytest.raises(EngineDeadError, match="engine was shut down"):
        instance.check_health()
    assert instance.health().status_code == 503
    got, reply = call(instance.completions, '{"prompt": [1, 2]}', {})
    assert got == 503 and reply["error"]["message"] == "engine was shut down"


def test_serve_command_refuses_a_bad_reload_dir_or_body_cap_before_starting_ray(
    nano_policy_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rollarc.serve.cli import main

    assert main([str(nano_policy_dir), "--reload-dir", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (
        f"rollarc serve: --reload-dir {tmp_path / 'missing'}: not a directory; create it or pass an existing one\n"
    )
    assert main([str(nano_policy_dir), "--max-body-bytes", "0"]) == 2
    assert capsys.readouterr().err == "rollarc serve: --max-body-bytes must be >= 1, got 0\n"


def test_the_openai_backend_sends_the_key_from_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollarc.serve.access import bearer_headers
    from rollarc.serve.config import OpenAIBackendConfig

    env = OpenAIBackendConfig().api_key_env
    assert env == "ROLLARC_API_KEY"
    monkeypatch.delenv(env, raising=False)
    assert bearer_headers(env) == {}
    monkeypatch.setenv(env, "s3cret")
    headers = bearer_headers(env)
    assert headers == {"Authorization": "Bearer s3cret"}
    ServerAccess.build("s3cret", 1024, None).check_key(headers["Authorization"])  # what the server accepts
    assert bearer_headers(None) == {}
