"""AsyncLLMEngine: many concurrent generate calls on one event loop, weight updates, abort, failure modes."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rollarc.engine import AsyncLLMEngine, EngineConfig, EngineDeadError, SamplingParams
from tests.unit.test_engine_models import hf_greedy, random_prompts, tiny_hf_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.fixture
def model():
    return tiny_hf_model()


def _run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_many_concurrent_generates_complete_correctly(model) -> None:
    prompts = random_prompts([3 + i % 11 for i in range(24)])
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=8))

    async def main():
        return await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts))

    try:
        completions = _run(main())
    finally:
        engine.shutdown()
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.finish_reason == "length"
        assert completion.token_ids == hf_greedy(model, prompt, 8)
    assert len({c.request_id for c in completions}) == 24


def test_update_weights_is_applied_between_steps_and_awaited(model) -> None:
    other = tiny_hf_model(seed=1)
    prompt = random_prompts([6])[0]
    engine = AsyncLLMEngine(model)

    async def main():
        long = asyncio.create_task(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=60)))
        while engine.stats()["generated_tokens"] < 3:
            await asyncio.sleep(0.001)
        await engine.update_weights(dict(other.named_parameters()), version=5)
        assert engine.version == 5
        after = await engine.generate(prompt, GREEDY)
        return await long, after

    try:
        long, after = _run(main())
    finally:
        engine.shutdown()
    assert long.token_versions[0] == 0 and long.token_versions[-1] == 5 and long.version == 0
    assert after.token_ids == hf_greedy(other, prompt, 8) and set(after.token_versions) == {5}


def test_bad_update_raises_and_the_engine_keeps_serving(model) -> None:
    engine = AsyncLLMEngine(model)

    async def main():
        with pytest.raises(KeyError, match="bogus"):
            await engine.update_weights({"bogus": torch.zeros(1)}, version=1)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            await engine.generate([10_000], GREEDY)
        return await engine.generate([1, 2, 3], GREEDY)

    try:
        completion = _run(main())
    finally:
        engine.shutdown()
    assert completion.finish_reason == "length" and engine.version == 0


def test_abort_and_cancel(model) -> None:
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=1))
    params = SamplingParams(temperature=0.0, max_tokens=100)

    async def main():
        running = asyncio.create_task(engine.generate([1, 2, 3], params, request_id="a"))
        waiting = asyncio.create_task(engine.generate([4, 5], params, request_id="b"))
        while engine.stats()["generated_tokens"] < 2:
            await asyncio.sleep(0.001)
        waiting.cancel()  # cancelling the awaiting task aborts the request
        engine.abort("a")
        aborted = await running
        with pytest.raises(asyncio.CancelledError):
            await waiting
        while engine.stats()["abort"] < 2:
            await asyncio.sleep(0.001)
        return aborted

    try:
        aborted = _run(main())
    finally:
        engine.shutdown()
    assert aborted.finish_reason == "abort" and 2 <= len(aborted.token_ids) < 100
    assert engine.stats()["running"] == 0 and engine.stats()["waiting"] == 0


def test_duplicate_request_id_is_rejected(model) -> None:
    engine = AsyncLLMEngine(model)

    async def main():
        first = asyncio.create_task(engine.generate([1, 2], SamplingParams(max_tokens=30), request_id="dup"))
        await asyncio.sleep(0)
        with pytest.raises(ValueError, match="already in use"):
            await engine.generate([1, 2], GREEDY, request_id="dup")
        return await first

    try:
        assert _run(main()).request_id == "dup"
    finally:
        engine.shutdown()


def test_shutdown_fails_pending_and_later_calls(model) -> None:
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=1))

    async def main():
        pending = [asyncio.create_task(engine.generate([1, 2], SamplingParams(max_tokens=100))) for _ in range(3)]
        await asyncio.sleep(0.05)
        await asyncio.to_thread(engine.shutdown)
        results = await asyncio.gather(*pending, return_exceptions=True)
        with pytest.raises(EngineDeadError, match="shut down"):
            await engine.generate([1], GREEDY)
        return results

    results = _run(main())
    assert any(isinstance(r, EngineDeadError) for r in results)


def test_a_crashed_loop_fails_callers_instead_of_hanging(model) -> None:
    engine = AsyncLLMEngine(model)

    def boom() -> list:
        raise RuntimeError("simulated engine bug")

    engine.engine.step = boom  # the instance's own attribute: only this test engine is affected

    async def main():
        with pytest.raises(EngineDeadError, match="simulated engine bug"):
            await engine.generate([1, 2, 3], GREEDY)
        with pytest.raises(EngineDeadError):
            await engine.generate([1, 2, 3], GREEDY)

    _run(main())
    engine.shutdown()


def test_generate_many_admits_every_prompt_at_one_step_boundary(model) -> None:
    """One command batch: every request is prefilled in the same step (same first-token time), results in order."""
    prompts = random_prompts([3 + i % 7 for i in range(12)])
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=16))

    async def main():
        return await engine.generate_many(prompts, [GREEDY] * len(prompts), cache_keys=[f"k{i}" for i in range(12)])

    try:
        completions = _run(main())
    finally:
        engine.shutdown()
    assert len({c.first_token_time for c in completions}) == 1
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.token_ids == hf_greedy(model, prompt, 8)


def test_generate_many_rejects_mismatched_lengths_and_cancelling_aborts_every_request(model) -> None:
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=4))
    long = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)

    async def main():
        with pytest.raises(ValueError, match="2 prompts but 1 params"):
            await engine.generate_many(random_prompts([3, 4]), [GREEDY])
        task = asyncio.ensure_future(engine.generate_many(random_prompts([3, 4, 5]), [long] * 3))
        while engine.stats()["running"] < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while engine.stats()["running"] or engine.stats()["waiting"]:
            await asyncio.sleep(0.001)
        return engine.stats()["abort"]

    try:
        assert _run(main()) == 3
    finally:
        engine.shutdown()


def test_on_tokens_streams_each_steps_tokens_and_the_completion_holds_the_rest(model) -> None:
    """A streaming server's view (rollarc serve, stream: true): a call per step with that step's new tokens, in order;
    the finishing step's token comes only in the completion; a cancelled stream leaves no watcher behind."""
    prompt = random_prompts([5])[0]
    engine = AsyncLLMEngine(model, EngineConfig(max_num_seqs=4))
    steps: list[tuple[list[int], list[float], list[int]]] = []

    async def main():
        done = await engine.generate(prompt, GREEDY, on_tokens=lambda *new: steps.append(new))
        cancelled = asyncio.create_task(
            engine.generate(prompt, SamplingParams(max_tokens=200), on_tokens=lambda *_: None)
        )
        while engine.stats()["generated_tokens"] < 12:
            await asyncio.sleep(0.001)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        while engine._watchers or engine._streamed:  # the abort resolves it at the next step; a leak times out
            await asyncio.sleep(0.001)
        assert engine.stats()["abort"] == 1
        return done

    try:
        done = _run(main())
    finally:
        engine.shutdown()
    assert [len(ids) for ids, _, _ in steps] == [1] * (GREEDY.max_tokens - 1)  # one token per decode step
    assert [t for ids, _, _ in steps for t in ids] == done.token_ids[:-1]
    assert [p for _, lps, _ in steps for p in lps] == done.logprobs[:-1]
    assert [v for _, _, vs in steps for v in vs] == [0] * (GREEDY.max_tokens - 1)
