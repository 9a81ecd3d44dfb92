"""The agent loop: one asyncio coroutine runs one multi-turn trajectory.

reset -> render the chat -> generate -> parse (inside the env) -> env.step -> repeat, until the episode
ends or ``max_turns``. The coroutine never blocks the event loop: generation is an awaitable (the
router / engine), and environment calls go through ``env_call``, which the EnvWorker runs in a thread
pool with a timeout. Anything that goes wrong with one trajectory fails that trajectory alone, with its
reason recorded.

History policy and context limit (documented in docs/architecture.md):
- ``history="full"``: the prompt is the whole conversation; ``history="last_k"``: the initial
  observation's system message plus the last ``history_k`` (assistant, observation) exchanges and the
  current observation.
- If a prompt plus ``max_tokens_per_turn`` would exceed ``context_limit`` tokens, the episode ends
  there with ``finish="context_limit"`` (no partial turn is generated or trained on).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.agent.turn import GenerateFn, GenerationFailure, generate_turn, turn_seed
from rollarc.data.config import PLAIN_PROMPT

if TYPE_CHECKING:
    from rollarc.config import AgentConfig, SamplingConfig  # type only: the training config is above agent/


class EnvFailure(RuntimeError):
    """An environment call raised or timed out; the trajectory fails with this reason.

    ``kind`` says how: ``timeout``, ``injected``, or ``error:<ExceptionType>`` (the env's own exception).
    """

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


EnvCall = Callable[..., Awaitable[Any]]
SpanFn = Callable[..., None]


def window(messages: list[Message], history: str, history_k: int) -> list[Message]:
    """The messages the model sees this turn, under the history policy."""
    if history == "full":
        return messages
    head = [m for m in messages[:1] if m.role == "system"]
    body = messages[len(head) :]
    # k (assistant, observation) exchanges and the observation before them: everything after the (k+1)-th
    # last assistant message (an observation may be several messages: one tool message per call)
    replies = [i for i, m in enumerate(body) if m.role == "assistant"]
    start = replies[-history_k - 1] + 1 if len(replies) > history_k else 0
    return head + body[start:]


async def run_trajectory(
    env: Any,
    renderer: ChatRenderer,
    generate: GenerateFn,
    agent: AgentConfig,
    sampling: SamplingConfig,
    traj: Trajectory,
    env_call: EnvCall,
    instructions: str = "",
    on_span: SpanFn | None = None,
    sampling_seed: int | None = None,
    reset_options: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode into ``traj`` (which carries its id, task and env seed) and return it.

    ``reset_options`` (when set) go to ``env.reset(options=...)``. When the reset's ``info`` holds
    ``messages`` (a list of {role, content}: a dataset row's chat prompt), the conversation starts with
    them instead of ``instructions`` plus one user turn.

    ``agent`` provides max_turns, max_tokens_per_turn, history, history_k and context_limit;
    ``sampling`` provides temperature, top_p and top_k. ``sampling_seed`` (when set) makes every turn's
    sampling reproducible whatever else the engine is batching.
    """
    clock = time.perf_counter
    start = clock()
    traj.timings = {"generate_s": 0.0, "env_s": 0.0}
    span = on_span or (lambda *args, **kwargs: None)

    t0 = clock()
    try:
        if reset_options is None:
            obs, info = await env_call(env.reset, seed=traj.seed)
        else:
            obs, info = await env_call(env.reset, seed=traj.seed, options=reset_options)
    except EnvFailure as err:
        return _finish(traj.fail(f"env reset: {err}", kind=f"env_reset_{err.kind}"), start, clock)
    traj.timings["env_s"] += clock() - t0
    span("env_step", t0, clock(), traj=traj.traj_id, task=traj.task)

    opening = info.get("messages") if isinstance(info, dict) else None
    plain = bool(info.get(PLAIN_PROMPT, False)) if isinstance(info, dict) else False  # a dataset's plain-text prompt
    tools = info.get("tools") if isinstance(info, dict) else None  # the tools' schemas, for the chat template
    if opening:
        messages = [Message(m["role"], m["content"]) for m in opening]
    else:
        messages = [Message("system", instructions)] if instructions else []
        messages.append(Message("user", obs))
    segment: Segment | None = None

    for turn in range(agent.max_turns):
        prompt = renderer.prompt_ids(window(messages, agent.history, agent.history_k), plain=plain, tools=tools)
        if len(prompt) + agent.max_tokens_per_turn > agent.context_limit:
            traj.finish = "context_limit"
            break
        if segment is not None and prompt[: len(segment)] == segment.token_ids:
            segment.extend_context(prompt[len(segment) :])
        else:
            segment = Segment()
            segment.extend_context(prompt)
            traj.segments.append(segment)

        t0 = clock()
        seed = None if sampling_seed is None else turn_seed(sampling_seed, traj.traj_id, turn)
        try:
            generated = await generate_turn(generate, prompt, agent.max_tokens_per_turn, sampling, traj.traj_id, seed)
        except GenerationFailure as err:
            return _finish(traj.fail(f"turn {turn}: {err}", kind=err.kind), start, clock)
        traj.timings["generate_s"] += clock() - t0
        completion = generated.completion
        traj.resumed_turns += int(generated.resumes > 0)
        traj.resumed_tokens += generated.kept_tokens
        segment.extend_generated(list(completion.token_ids), list(completion.logprobs), list(completion.token_versions))
        traj.prompt_tokens += len(prompt)
        traj.generated_tokens += len(completion.token_ids)
        traj.turn_prompt_tokens.append(len(prompt))
        traj.turn_new_tokens.append(len(completion.token_ids))
        traj.cached_tokens += completion.cached_prompt_tokens
        action = renderer.reply_text(list(completion.token_ids))
        messages.append(Message("assistant", action))

        t0 = clock()
        try:
            obs, reward, terminated, truncated, info = await env_call(env.step, action)
        except EnvFailure as err:
            return _finish(traj.fail(f"env step {turn}: {err}", kind=f"env_step_{err.kind}"), start, clock)
        traj.timings["env_s"] += clock() - t0
        traj.turn_env_s.append(clock() - t0)
        span("env_step", t0, clock(), traj=traj.traj_id, task=traj.task, step_reward=float(reward))

        traj.turn_rewards.append(float(reward))
        traj.num_turns = turn + 1
        traj.invalid_actions += int(bool(info.get("invalid_action", False)))
        traj.tool_calls += int(info.get("tool_calls", 0))
        traj.tool_errors += int(info.get("tool_errors", 0))
        if terminated or truncated:
            traj.finish = "terminated" if terminated else "truncated"
            traj.success = bool(info.get("success", False))
            break
        replies = info.get("messages")  # tool results, one tool-role message per call
        if replies:
            messages.extend(Message(m["role"], m["content"]) for m in replies)
        else:
            messages.append(Message("user", obs))
    else:
        traj.finish = "max_turns"

    traj.reward = float(sum(traj.turn_rewards))
    if not math.isfinite(traj.reward):
        # Kept as data, not hidden: the controller refuses to train on it and stops the step.
        traj.failure_reason = "non-finite reward"
    return _finish(traj, start, clock)


def _finish(traj: Trajectory, start: float, clock: Callable[[], float]) -> Trajectory:
    traj.timings["total_s"] = clock() - start
    return traj
