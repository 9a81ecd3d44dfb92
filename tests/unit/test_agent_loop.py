"""The agent loop and episode runner with a scripted engine: masks, segments, history, failures."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import ClassVar

import gymnasium
import pytest
from gymnasium.spaces import Text

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.loop import turn_seed, window
from rollarc.agent.runner import EpisodeRunner, EpisodeSpec
from rollarc.agent.trajectory import NO_VERSION, Trajectory
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.engine.types import Completion, SamplingParams
from rollarc.envs.latency import LatencyConfig
from rollarc.models import new_policy

_, TOKENIZER = new_policy("nano")
RENDERER = ChatRenderer(TOKENIZER)
SAMPLING = SamplingConfig()


class ScriptedEngine:
    """Replies "U" (or a scripted sequence of replies); records prompts; can abort the first attempt."""

    def __init__(self, replies: list[str] | None = None, abort_first: bool = False, version: int = 7):
        self.replies = replies
        self.abort_first = abort_first
        self.version = version
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        self.prompts.append(list(prompt_ids))
        self.params.append(params)
        if self.abort_first and len(self.prompts) == 1:
            return Completion(cache_key, len(prompt_ids), [], [], [], self.version, "abort")
        text = self.replies[(len(self.prompts) - 1) % len(self.replies)] if self.replies else "U"
        ids = RENDERER.encode_reply(text)
        return Completion(
            cache_key, len(prompt_ids), ids, [-0.5] * len(ids), [self.version] * len(ids), self.version, "stop"
        )


def task(**env_kwargs) -> TaskConfig:
    agent = env_kwargs.pop("agent", {})
    latency = env_kwargs.pop("latency", {})
    timeout = env_kwargs.pop("step_timeout_s", 5.0)
    return TaskConfig(
        name="scripted",
        env={"entry_point": "runtime_plugins:ScriptedEnv", "kwargs": env_kwargs},
        agent=AgentConfig(**{"max_turns": 10, "max_tokens_per_turn": 4, **agent}),
        latency=LatencyConfig(**latency),
        step_timeout_s=timeout,
    )


def run(task_cfg: TaskConfig, engine: ScriptedEngine, seed: int = 1, sampling_seed: int | None = None) -> Trajectory:
    async def go() -> Trajectory:
        runner = EpisodeRunner({task_cfg.name: task_cfg}, RENDERER, engine, SAMPLING, max_env_threads=4)
        try:
            return await runner.run(EpisodeSpec("t1", task_cfg.name, seed, sampling_seed=sampling_seed))
        finally:
            runner.close()

    return asyncio.run(go())


def test_full_history_is_one_segment_and_only_sampled_tokens_are_trained():
    engine = ScriptedEngine()
    traj = run(task(turns=3, agent={"history": "full"}), engine)
    assert traj.status == "ok" and traj.success and traj.num_turns == 3 and traj.reward == 3.0
    assert len(traj.segments) == 1
    seg = traj.segments[0]
    text = TOKENIZER.decode(seg.token_ids)
    assert text == (
        "<|user|>t0..<|end|><|assistant|>U<|end|><|user|>t1..<|end|><|assistant|>U<|end|>"
        "<|user|>t2..<|end|><|assistant|>U<|end|>"
    )
    trained = [tok for tok, m in zip(seg.token_ids, seg.assistant_mask, strict=True) if m]
    assert TOKENIZER.decode(trained) == "U<|end|>U<|end|>U<|end|>"
    assert all(v == 7 for v, m in zip(seg.versions, seg.assistant_mask, strict=True) if m)
    assert all(v == NO_VERSION for v, m in zip(seg.versions, seg.assistant_mask, strict=True) if not m)
    assert [lp for lp, m in zip(seg.logprobs, seg.assistant_mask, strict=True) if m] == [-0.5] * 6
    assert traj.min_version == 7
    # The second prompt extends the first conversation exactly (so the engine can reuse its KV).
    assert engine.prompts[1][: len(engine.prompts[0])] == engine.prompts[0]


def test_last_k_history_starts_a_segment_per_turn():
    engine = ScriptedEngine()
    traj = run(task(turns=3, agent={"history": "last_k", "history_k": 0}), engine)
    assert len(traj.segments) == 3
    assert [TOKENIZER.decode(s.token_ids) for s in traj.segments] == [
        f"<|user|>t{i}..<|end|><|assistant|>U<|end|>" for i in range(3)
    ]
    assert window([1, 2, 3, 4, 5], "full", 0) == [1, 2, 3, 4, 5]


def test_invalid_replies_are_counted_not_raised():
    traj = run(task(turns=2), ScriptedEngine(replies=["x?", "U"]))
    assert traj.status == "ok" and not traj.success and traj.invalid_actions == 1 and traj.reward == 1.0


def test_context_limit_ends_the_episode_before_generating():
    engine = ScriptedEngine()
    traj = run(task(turns=5, agent={"history": "full", "context_limit": 30}), engine)
    assert traj.finish == "context_limit"
    assert all(len(p) + 4 <= 30 for p in engine.prompts)
    assert traj.num_turns == len(engine.prompts) < 5


def test_max_turns():
    traj = run(task(turns=50, agent={"max_turns": 4}), ScriptedEngine())
    assert traj.finish == "max_turns" and traj.num_turns == 4 and not traj.success


def test_aborted_turn_is_retried_and_keeps_earlier_turns():
    engine = ScriptedEngine(abort_first=True)
    traj = run(task(turns=2), engine)
    assert traj.status == "ok" and traj.num_turns == 2 and len(engine.prompts) == 3
    assert engine.prompts[0] == engine.prompts[1]


class CutOnce:
    """Replies "U" (2 tokens); the first attempt is cut by a weight update after one token, then resumes."""

    def __init__(self):
        self.calls: list[tuple[list[int], SamplingParams]] = []

    async def __call__(self, prompt_ids: list[int], params: SamplingParams, cache_key: str) -> Completion:
        self.calls.append((list(prompt_ids), params))
        ids = RENDERER.encode_reply("U")[params.skip_draws :]
        if len(self.calls) == 1:
            return Completion(cache_key, len(prompt_ids), ids[:1], [-0.5], [7], 7, "abort")
        return Completion(cache_key, len(prompt_ids), ids, [-0.25] * len(ids), [8] * len(ids), 8, "stop")


def test_a_turn_cut_by_a_weight_update_resumes_and_is_counted():
    engine = CutOnce()
    traj = run(task(turns=1), engine)
    reply = RENDERER.encode_reply("U")
    assert traj.status == "ok" and traj.num_turns == 1 and len(engine.calls) == 2
    assert engine.calls[1][0] == engine.calls[0][0] + reply[:1]  # prompt + the partial output
    (segment,) = traj.segments
    generated = [i for i, m in enumerate(segment.assistant_mask) if m]
    assert [segment.token_ids[i] for i in generated] == reply  # the turn an uninterrupted attempt gives
    assert [segment.versions[i] for i in generated] == [7, 8]
    assert [segment.logprobs[i] for i in generated] == [-0.5, -0.25]
    assert (traj.resumed_turns, traj.resumed_tokens, traj.generated_tokens) == (1, 1, 2)
    assert traj.prompt_tokens == len(engine.calls[0][0])  # the prompt once, not the resumption's


def test_env_that_raises_fails_only_that_trajectory_with_its_reason():
    traj = run(task(turns=2, raise_on_seed_mod=2), ScriptedEngine(), seed=4)
    assert traj.status == "failed" and "scripted env crash on seed 4" in traj.failure_reason
    # Regression: the reason was cut at its first colon ("env step 0"); the kind and whole message are kept.
    assert traj.failure_reason == "env step 0: RuntimeError: scripted env crash on seed 4"
    assert traj.failure_kind == "env_step_error:RuntimeError"
    ok = run(task(turns=2, raise_on_seed_mod=2), ScriptedEngine(), seed=3)
    assert ok.status == "ok"


def test_env_that_hangs_times_out_and_is_counted():
    cfg = task(turns=2, hang_on_seed_mod=1, hang_s=1.0, step_timeout_s=0.05)

    async def go():
        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, ScriptedEngine(), SAMPLING, max_env_threads=4)
        traj = await runner.run(EpisodeSpec("t", cfg.name, 1))
        runner.close()
        return traj, runner.stats

    traj, stats = asyncio.run(go())
    assert traj.status == "failed" and "timed out after 0.05 s" in traj.failure_reason
    assert traj.failure_kind == "env_step_timeout"
    assert stats.env_timeouts == 1 and stats.failed == 1
    assert stats.failures.as_dict() == {
        "failure_reasons": {"env_step_timeout": 1},
        "failure_examples": {"env_step_timeout": ["env step 0: timed out after 0.05 s in step"]},
    }


def test_injected_failures_fail_the_trajectory_at_a_step_not_at_reset():
    traj = run(task(turns=2, latency={"kind": "fixed", "fixed_s": 0.0, "failure_prob": 1.0}), ScriptedEngine())
    assert traj.status == "failed" and "injected failure" in traj.failure_reason
    # Regression: latency and failures model env *steps*; reset was wrongly hit too.
    assert traj.failure_reason.startswith("env step 0")
    assert traj.failure_kind == "env_step_injected"


def test_nan_reward_is_kept_and_flagged():
    traj = run(task(turns=2, nan_reward=True), ScriptedEngine())
    assert math.isnan(traj.reward) and traj.failure_reason == "non-finite reward"


def test_sampling_seeds_depend_on_trajectory_and_turn_only():
    engine = ScriptedEngine()
    run(task(turns=2), engine, sampling_seed=5)
    seeds = [p.seed for p in engine.params]
    assert seeds == [turn_seed(5, "t1", 0), turn_seed(5, "t1", 1)] and seeds[0] != seeds[1]
    assert turn_seed(5, "t1", 0) == turn_seed(5, "t1", 0) != turn_seed(6, "t1", 0)
    assert turn_seed(5, "t1", 0) == 2123546084757780632  # first attempts keep the seeds of earlier versions


def test_a_retried_turn_draws_the_numbers_of_its_first_attempt():
    # Regression: the attempt number was part of the seed, so a turn migrated off a withdrawn borrowed replica (or
    # aborted for any reason) generated other tokens than the same turn on a replica that was never withdrawn.
    engine = ScriptedEngine(abort_first=True)
    traj = run(task(turns=1), engine, sampling_seed=5)
    assert traj.status == "ok" and len(engine.params) == 2
    assert engine.params[0] == engine.params[1] and engine.params[0].seed == turn_seed(5, "t1", 0)


def test_greedy_spec_overrides_temperature():
    cfg = task(turns=1)
    engine = ScriptedEngine()

    async def go():
        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, engine, SamplingConfig(temperature=0.9), max_env_threads=2)
        await runner.run(EpisodeSpec("t", cfg.name, 1, greedy=True))
        await runner.run(EpisodeSpec("u", cfg.name, 1))
        runner.close()

    asyncio.run(go())
    assert [p.temperature for p in engine.params] == [0.0, 0.9]


@pytest.mark.parametrize("mode", ["full", "last_k"])
def test_trajectory_masks_feed_the_batch(mode):
    from rollarc.train.batch import build_batch

    trajs = [
        run(task(turns=2, agent={"history": mode}), ScriptedEngine(replies=[r]), seed=s)
        for s, r in [(1, "U"), (2, "D")]
    ]
    for i, t in enumerate(trajs):
        t.traj_id = f"t{i}"
    batch = build_batch([trajs], "grpo", 1e-6, TOKENIZER.pad_token_id)
    # rewards 2 and 0 -> sample-std GRPO advantages +1/sqrt(2), -1/sqrt(2)
    adv = {t: round(a, 4) for t, a in zip(batch.row_traj, batch.advantages.tolist(), strict=True)}
    assert adv == {"t0": round(2**-0.5, 4), "t1": round(-(2**-0.5), 4)}
    targets = batch.input_ids[:, 1:][batch.loss_mask.bool()]
    assert TOKENIZER.decode(targets.tolist()).replace("<|end|>", "|") == "U|U|D|D|"
    assert (batch.behav_logp[batch.loss_mask.bool()] == -0.5).all()
    assert (batch.versions[~batch.loss_mask.bool()] == NO_VERSION).all()


def test_injected_failures_do_not_depend_on_which_trajectories_share_the_runner():
    """Regression: one generator per runner made a trajectory's failures depend on the interleaving of the
    trajectories sharing its EnvWorker (Ray timing), so synchronous runs with failure_prob > 0 were not
    reproducible. Each trajectory now draws from a generator of its own sampling seed and id."""
    cfg = task(turns=6, latency={"kind": "fixed", "fixed_s": 0.0, "failure_prob": 0.3})
    specs = [EpisodeSpec(f"g0-{j}", cfg.name, 3, group_id="g0", sampling_seed=1000 + j) for j in range(8)]

    def outcomes(order: list[EpisodeSpec], worker_seed: int) -> dict[str, tuple[str, int]]:
        async def go() -> list[Trajectory]:
            runner = EpisodeRunner({cfg.name: cfg}, RENDERER, ScriptedEngine(), SAMPLING, latency_seed=worker_seed)
            try:
                return [await runner.run(spec) for spec in order]  # one after another: a fixed interleaving
            finally:
                runner.close()

        return {t.traj_id: (t.failure_reason or "ok", t.num_turns) for t in asyncio.run(go())}

    forward = outcomes(specs, worker_seed=0)
    assert outcomes(specs[::-1], worker_seed=0) == forward
    assert outcomes(specs[3:], worker_seed=7) == {
        k: v for k, v in forward.items() if k in {s.traj_id for s in specs[3:]}
    }
    assert 0 < sum(v[0] != "ok" for v in forward.values()) < len(specs)  # both outcomes occur: the test can fail


def test_failure_retries_retry_the_step_and_count_every_failed_try():
    cfg = task(turns=2, latency={"kind": "fixed", "fixed_s": 0.0, "failure_prob": 1.0, "failure_retries": 2})

    async def go(spec_cfg: TaskConfig) -> tuple[Trajectory, int]:
        runner = EpisodeRunner({spec_cfg.name: spec_cfg}, RENDERER, ScriptedEngine(), SAMPLING, latency_seed=0)
        try:
            return await runner.run(
                EpisodeSpec("t", spec_cfg.name, 3, sampling_seed=11)
            ), runner.stats.injected_failures
        finally:
            runner.close()

    traj, tries_failed = asyncio.run(go(cfg))
    assert traj.status == "failed" and traj.failure_kind == "env_step_injected"
    assert tries_failed == 3  # the first try and both retries of step 0
    # A transient failure leaves the env untouched: with enough retries every step is applied exactly once.
    flaky = task(turns=6, latency={"kind": "fixed", "fixed_s": 0.0, "failure_prob": 0.5, "failure_retries": 10})
    traj, tries_failed = asyncio.run(go(flaky))
    assert traj.status == "ok" and traj.num_turns == 6
    assert tries_failed >= 1  # 0.5 per try: this seed's draws fail some tries, which were retried
    no_retry = flaky.model_copy(update={"latency": flaky.latency.model_copy(update={"failure_retries": 0})})
    assert asyncio.run(go(no_retry))[0].status == "failed"  # the same draws without retries fail the trajectory


class ThreadRecordingEnv(gymnasium.Env[str, str]):
    """One turn; records the thread each reset and step ran on; seed 13 raises."""

    threads: ClassVar[list[int]] = []

    def __init__(self) -> None:
        self.observation_space = Text(max_length=8)
        self.action_space = Text(max_length=8)
        self.seed_value = 0

    def reset(self, *, seed=None, options=None):
        ThreadRecordingEnv.threads.append(threading.get_ident())
        self.seed_value = seed or 0
        return "go", {}

    def step(self, action):
        ThreadRecordingEnv.threads.append(threading.get_ident())
        if self.seed_value == 13:
            raise RuntimeError("inline crash")
        return "", float(action.strip() == "U"), True, False, {"success": action.strip() == "U"}


@pytest.mark.parametrize("inline", [True, False])
def test_inline_env_steps_run_on_the_event_loop_with_the_same_outcomes(inline: bool):
    cfg = TaskConfig(
        name="rec",
        env={"entry_point": "tests.unit.test_agent_loop:ThreadRecordingEnv"},
        agent=AgentConfig(max_turns=1, max_tokens_per_turn=4),
        inline_env_steps=inline,
    )
    ThreadRecordingEnv.threads.clear()
    good, bad = run(cfg, ScriptedEngine(), seed=1), run(cfg, ScriptedEngine(), seed=13)
    assert good.status == "ok" and good.success and good.reward == 1.0
    assert bad.status == "failed" and bad.failure_reason == "env step 0: RuntimeError: inline crash"
    assert bad.failure_kind == "env_step_error:RuntimeError"
    on_loop = [t == threading.get_ident() for t in ThreadRecordingEnv.threads]
    assert len(on_loop) == 4 and all(on_loop) == inline and (any(on_loop) == inline)


def test_step_timeout_counts_from_when_a_thread_takes_the_call_not_from_its_wait_in_the_queue():
    # Regression: 100 held-out episodes reaching a sandboxed tool call at once on a 2-thread EnvWorker timed out
    # while still queued (step_timeout_s counted the wait for a free thread), failing a third of them under load,
    # and each was counted as a stuck thread. Here 6 steps of 0.2 s share one thread under a 0.5 s step limit:
    # the last waits 1 s in the queue, yet every step runs well inside its own limit.
    cfg = task(turns=1, hang_on_seed_mod=1, hang_s=0.2, step_timeout_s=0.5)

    async def go():
        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, ScriptedEngine(), SAMPLING, max_env_threads=1)
        try:
            return await asyncio.gather(*[runner.run(EpisodeSpec(f"t{i}", cfg.name, i + 1)) for i in range(6)])
        finally:
            runner.close()

    trajs = asyncio.run(go())
    assert [t.status for t in trajs] == ["ok"] * 6
    assert [t.failure_reason for t in trajs] == [None] * 6


def test_a_call_still_queued_when_its_trajectory_is_cancelled_never_runs():
    # The wait for a free thread is bounded by the trajectory's own timeout, which cancels it: the call must go too.
    cfg = task(turns=1)
    steps: list[int] = []

    class Env:
        def step(self, seed: int) -> int:
            steps.append(seed)
            return seed

    async def go():
        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, ScriptedEngine(), SAMPLING, max_env_threads=1)
        env = Env()
        blocker = threading.Event()
        try:
            first = asyncio.ensure_future(runner._call_in_thread(blocker.wait, 5.0))  # holds the only thread
            queued = asyncio.ensure_future(runner._call_in_thread(env.step, 5.0, 2))
            await asyncio.sleep(0.05)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            blocker.set()
            assert await first is True
            return await runner._call_in_thread(env.step, 5.0, 3)
        finally:
            runner.close()

    assert asyncio.run(go()) == 3
    assert steps == [3]
