"""One request's bad parameters fail that request alone; the engine loop never dies of them.

Before: `SamplingParams(stop=(5,))` raised `TypeError` inside `step()` (`5 in text`), and a `top_k` beyond
int64 raised inside the sampler's `torch.tensor`: `AsyncLLMEngine`'s thread died and every later request got
`EngineDeadError` (`rollarc serve` answered 503 to everything).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from rollarc.engine import AsyncLLMEngine, LLMEngine, SamplingParams
from tests.unit.test_engine_models import nano_policy

GOOD = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


@pytest.mark.parametrize(
    "bad, message",
    [
        (replace(GOOD, stop=(5,)), "SamplingParams.stop must hold strings only, got [5]"),
        (replace(GOOD, top_k=2**70), f"SamplingParams.top_k must be an integer in [0, {2**63 - 1}] (0 = off)"),
        (replace(GOOD, seed=2**70), "SamplingParams.seed must be None or an integer in"),
        (replace(GOOD, max_tokens=2.5), "SamplingParams.max_tokens must be an integer, got 2.5"),
    ],
)
def test_async_engine_refuses_a_request_it_cannot_run_and_serves_the_next(bad: SamplingParams, message: str) -> None:
    model, tokenizer = nano_policy()
    engine = AsyncLLMEngine(model, tokenizer=tokenizer)

    async def main() -> tuple[str, list[int]]:
        with pytest.raises(ValueError) as refused:
            await engine.generate([1, 2, 3], bad)
        good = await engine.generate([1, 2, 3], GOOD)
        return str(refused.value), good.token_ids

    try:
        refusal, tokens = asyncio.run(asyncio.wait_for(main(), 120))
        engine.check_alive()
    finally:
        engine.shutdown()
    assert message in refusal
    assert tokens == LLMEngine(model, tokenizer=tokenizer).generate([[1, 2, 3]], GOOD)[0].token_ids


def test_a_prompt_that_is_not_integers_is_a_value_error() -> None:
    model, tokenizer = nano_policy()
    with pytest.raises(ValueError, match=r"prompt ids must be integers, got \[1, None\]"):
        LLMEngine(model, tokenizer=tokenizer).add_request([1, None])


def test_a_stop_check_that_raises_inside_step_fails_that_request_alone() -> None:
    """Params changed after admission (so no check saw them): the step fails that request, not the batch."""
    model, tokenizer = nano_policy()
    engine = LLMEngine(model, tokenizer=tokenizer)
    poisoned = engine.add_request([1, 2, 3], replace(GOOD, stop=("zz",)))
    healthy = engine.add_request([4, 5], GOOD)
    engine._requests[poisoned].params = replace(GOOD, stop=(5,))
    finished = []
    while engine.has_unfinished():
        finished += engine.step()
    by_id = {c.request_id: c for c in finished}
    assert by_id[poisoned].finish_reason == "error"
    assert by_id[poisoned].error == (
        "stop check failed: TypeError(\"'in <string>' requires string as left operand, not int\")"
    )
    assert len(by_id[poisoned].token_ids) == 1  # the token sampled in the step that failed
    reference = LLMEngine(model, tokenizer=tokenizer).generate([[4, 5]], GOOD)[0]
    assert by_id[healthy].finish_reason == "length" and by_id[healthy].token_ids == reference.token_ids
    assert engine.stats()["error"] == 1 and engine.stats()["running"] == 0


class FailingTokenizer:
    """A tokenizer whose decode fails as a Rust tokenizer does when another thread holds it."""

    def decode(self, ids: list[int]) -> str:
        raise RuntimeError("Already borrowed")


def test_a_tokenizer_that_fails_to_decode_fails_only_the_requests_with_stop_strings() -> None:
    model, tokenizer = nano_policy()
    engine = LLMEngine(model, tokenizer=FailingTokenizer())
    with_stop = engine.add_request([1, 2, 3], replace(GOOD, stop=("zz",)))
    without = engine.add_request([4, 5], GOOD)
    finished = []
    while engine.has_unfinished():
        finished += engine.step()
    by_id = {c.request_id: c for c in finished}
    assert (by_id[with_stop].finish_reason, by_id[with_stop].error) == (
        "error",
        "stop check failed: RuntimeError('Already borrowed')",
    )
    reference = LLMEngine(model, tokenizer=tokenizer).generate([[4, 5]], GOOD)[0]
    assert by_id[without].token_ids == reference.token_ids and by_id[without].finish_reason == "length"
