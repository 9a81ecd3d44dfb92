"""The OpenAI completions wire format: hand-built JSON in both directions, and the rollout backend config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rollarc.config import load_train_config
from rollarc.config.io import ConfigError
from rollarc.engine.types import Completion, SamplingParams
from rollarc.serve.protocol import (
    ProtocolError,
    RequestError,
    RequestLimits,
    completion_request,
    completion_response,
    parse_completion,
    parse_request,
)
from rollarc.serve.weights import state_digest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LIMITS = RequestLimits(vocab_size=200, max_model_len=64)


def test_request_carries_token_ids_sampling_and_asks_for_ids_and_logprobs():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_tokens=3, seed=42)
    assert completion_request("m", [5, 6, 7], params) == {
        "model": "m",
        "prompt": [5, 6, 7],
        "max_tokens": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "n": 1,
        "logprobs": 0,
        "echo": False,
        "stream": False,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "top_k": 5,
        "seed": 42,
    }
    greedy = completion_request("m", [1], SamplingParams(temperature=0.0, max_tokens=2))
    assert "seed" not in greedy and "top_k" not in greedy and greedy["temperature"] == 0.0


def test_reply_with_token_ids_logprobs_and_versions():
    body = {
        "choices": [
            {
                "text": "ab",
                "finish_reason": "length",
                "token_ids": [11, 12],
                "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.25]},
                "rollarc_token_versions": [3, 4],
            }
        ],
        "rollarc_version": 3,
    }
    c = parse_completion(body, prompt_len=4, request_id="r", fallback_version=0)
    assert (c.token_ids, c.logprobs, c.token_versions, c.version) == ([11, 12], [-0.5, -1.25], [3, 4], 3)
    assert (c.prompt_len, c.finish_reason, c.request_id) == (4, "length", "r")


def test_vllm_style_reply_ids_from_token_strings_and_the_adapters_version():
    body = {
        "choices": [
            {
                "text": "x",
                "finish_reason": "stop",
                "logprobs": {"tokens": ["token_id:7", "token_id:2"], "token_logprobs": [-0.1, -2.0]},
            }
        ]
    }
    c = parse_completion(body, prompt_len=2, request_id="r", fallback_version=9)
    assert (c.token_ids, c.logprobs, c.token_versions, c.version, c.finish_reason) == (
        [7, 2],
        [-0.1, -2.0],
        [9, 9],
        9,
        "stop",
    )


@pytest.mark.parametrize(
    "body, message",
    [
        ({"choices": []}, "no choices"),
        ([1, 2], "no choices"),
        ({"choices": ["x"]}, "not an object"),
        ({"choices": [{"logprobs": {"tokens": ["token_id:x"], "token_logprobs": [-1.0]}}]}, "not integers"),
        ({"choices": [{"logprobs": {"tokens": ["a"], "token_logprobs": [-1.0]}}]}, "no token ids"),
        ({"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0]}}]}, "2 token ids but 1"),
        ({"choices": [{"token_ids": [1], "logprobs": None}]}, "no logprobs"),
        ({"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": [None]}}]}, "non-finite"),
        (
            {"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": [-1.0]}, "rollarc_token_versions": []}]},
            "0 rollarc_token_versions",
        ),
    ],
)
def test_replies_a_rollout_cannot_use_are_refused(body, message):
    with pytest.raises(ProtocolError, match=message):
        parse_completion(body, 1, "r", 0)


def tokenize(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def test_server_parses_token_ids_text_and_sampling():
    parsed = parse_request(
        {
            "model": "rollarc",
            "prompt": [3, 4],
            "max_tokens": 5,
            "temperature": 0,
            "seed": 1,
            "top_k": -1,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        },
        "rollarc",
        tokenize,
        LIMITS,
    )
    assert parsed.prompt_ids == [3, 4] and parsed.logprobs and parsed.tokens_as_ids
    assert parsed.params == SamplingParams(temperature=0.0, max_tokens=5, seed=1)
    assert parse_request({"prompt": "hi"}, "rollarc", tokenize, LIMITS).prompt_ids == [104, 105]
    assert parse_request({"prompt": [[1, 2]]}, "rollarc", tokenize, LIMITS).prompt_ids == [1, 2]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"model": "other", "prompt": [1]}, "not served here"),
        ({"prompt": [1], "n": 2}, "n must be 1"),
        ({"prompt": []}, "prompt must be"),
        ({"prompt": [1, "a"]}, "prompt must hold integer token ids"),
        ({"prompt": [1], "stream": "yes"}, "stream must be true or false"),
        ({"prompt": [1], "logprobs": 5}, "logprobs must be"),
        ({"prompt": [1], "temperature": -1}, "temperature"),
    ],
)
def test_server_refuses_bad_requests_naming_the_field(body, message):
    with pytest.raises(RequestError, match=message):
        parse_request(body, "rollarc", tokenize, LIMITS)


def test_server_reply_round_trips_through_the_client_parser():
    completion = Completion(
        request_id="x",
        prompt_len=3,
        token_ids=[8, 9, 10],
        logprobs=[-0.25, -0.5, -3.0],
        token_versions=[2, 2, 3],
        version=2,
        finish_reason="length",
    )
    parsed = parse_request(
        {"prompt": [1, 2, 3], "logprobs": 0, "return_tokens_as_token_ids": True}, "m", tokenize, LIMITS
    )
    body = completion_response(completion, parsed, "m", "abc", ["a", "b", "c"])
    choice = body["choices"][0]
    assert choice["logprobs"]["tokens"] == ["token_id:8", "token_id:9", "token_id:10"]
    assert choice["logprobs"]["text_offset"] == [0, 1, 2] and body["rollarc_version"] == 2
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    back = parse_completion(body, 3, "x", fallback_version=99)
    assert (back.token_ids, back.logprobs, back.token_versions, back.version, back.finish_reason) == (
        [8, 9, 10],
        [-0.25, -0.5, -3.0],
        [2, 2, 3],
        2,
        "length",
    )
    text_tokens = parse_request({"prompt": [1], "logprobs": 1}, "m", tokenize, LIMITS)
    assert completion_response(completion, text_tokens, "m", "abc", ["a", "b", "c"])["choices"][0]["logprobs"][
        "tokens"
    ] == ["a", "b", "c"]
    no_logprobs = parse_request({"prompt": [1]}, "m", tokenize, LIMITS)
    assert completion_response(completion, no_logprobs, "m", "abc", [])["choices"][0]["logprobs"] is None


def test_weights_digest_sees_a_one_ulp_change():
    state = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor(1.5)}
    same = {k: v.clone() for k, v in state.items()}
    assert state_digest(state) == state_digest(same)
    same["a"][1, 2] = torch.nextafter(same["a"][1, 2], torch.tensor(10.0))
    assert state_digest(state) != state_digest(same)
    assert state_digest({"a": state["a"].to(torch.bfloat16)}) != state_digest({"a": state["a"]})


def test_openai_backend_config_loads_and_checks(tmp_path):
    cfg = load_train_config(CONFIGS / "openai_backend.yaml")
    assert cfg.rollout.backend == "openai" and cfg.rollout.openai.base_urls == ["http://127.0.0.1:8000"]
    with pytest.raises(ConfigError, match="base_urls is empty"):
        load_train_config(CONFIGS / "openai_backend.yaml", ["rollout.openai.base_urls=[]"])
    with pytest.raises(ConfigError, match="must start with http"):
        load_train_config(CONFIGS / "openai_backend.yaml", ["rollout.openai.base_urls=[localhost:8000]"])
    refusal = (  # the in-flight policy's one rule (rollarc.policy.in_flight), at config validation
        "async.in_flight_update 'continue' needs an engine that versions each token, which rollout.backend "
        "'openai' does not; use finish or abort"
    )
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        load_train_config(CONFIGS / "openai_backend.yaml", ["async.in_flight_update=continue"])
    assert load_train_config(CONFIGS / "quickstart.yaml").rollout.backend == "builtin"


def test_rollarc_serve_refuses_a_directory_that_is_not_a_model(tmp_path, capsys):
    from rollarc.cli import main

    assert main(["serve", str(tmp_path)]) == 2
    assert "is not an HF-format model directory" in capsys.readouterr().err
