"""What the judge reads and what it learns: token tails, solver-measured progress, noisy-expert episodes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.config import AgentConfig, SamplingConfig, TaskConfig
from rollarc.envs.frozen_lake import FrozenLakeEnv
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rewards.config import RewardTrainConfig
from rollarc.rewards.data import generate_examples, labelled_episode
from rollarc.rewards.inputs import reward_tokens
from rollarc.rewards.labels import expert_distance, progress_label

RENDERER = ChatRenderer(build_tokenizer())
SAMPLING = SamplingConfig()


def test_reward_tokens_are_the_tail_of_the_last_segment():
    traj = Trajectory(
        traj_id="t", task="x", seed=0, segments=[Segment(token_ids=[1, 2, 3]), Segment(token_ids=[4, 5, 6, 7])]
    )
    assert reward_tokens(traj, 3) == [5, 6, 7]
    assert reward_tokens(traj, 10) == [4, 5, 6, 7]
    assert reward_tokens(Trajectory(traj_id="t", task="x", seed=0), 5) == []
    with pytest.raises(ValueError, match="context_tokens"):
        reward_tokens(traj, 0)


def test_progress_label_by_hand():
    assert progress_label(True, 10, None) == 1.0
    assert progress_label(False, 10, 4) == pytest.approx(0.6)
    assert progress_label(False, 10, 10) == 0.0
    assert progress_label(False, 10, 14) == 0.0  # walked away from the goal: clipped
    assert progress_label(False, 10, None) == 0.0  # dead end
    assert progress_label(False, None, 3) == 0.0


def test_expert_distance_on_a_given_map_leaves_the_env_alone():
    env = FrozenLakeEnv(max_steps=50)
    env.reset(seed=0, options={"map": ["SFF", "FHF", "FFG"]})
    assert expert_distance(env, 50) == 4  # around the hole: R R D D (or D D R R)
    env.step("R")
    assert expert_distance(env, 50) == 3
    assert env.turn == 1  # measured on a copy
    assert expert_distance(env, 2) is None  # not within the horizon
    env.step("D")  # into the hole: a dead end
    assert expert_distance(env, 50) is None


def scripted_task(turns: int = 3) -> TaskConfig:
    return TaskConfig(
        name="scripted",
        env={"entry_point": "runtime_plugins:ScriptedEnv", "kwargs": {"turns": turns}},
        agent=AgentConfig(max_turns=10, max_tokens_per_turn=2, history="full"),
    )


def episode(task: TaskConfig, epsilon: float, cut_at: int | None, actions: list[str] | None = None):
    train = RewardTrainConfig(episodes=10, random_actions=actions or ["D"])
    return asyncio.run(
        labelled_episode(task, 5, epsilon, cut_at, RENDERER, SAMPLING, train, 32, np.random.default_rng(0))
    )


def test_scripted_env_labels_by_hand():
    # ScriptedEnv(turns=3): the expert says "U"; success means every action was "U"; d_start = 3.
    perfect = episode(scripted_task(), epsilon=0.0, cut_at=None)
    assert perfect.success and perfect.progress == 1.0
    cut = episode(scripted_task(), epsilon=0.0, cut_at=1)  # one expert move, then the turn limit
    assert not cut.success and cut.progress == pytest.approx(1 / 3)
    wrong = episode(scripted_task(), epsilon=1.0, cut_at=1)  # a "D": success is no longer reachable
    assert wrong.progress == 0.0


def test_example_tokens_end_with_the_last_reply():
    example = episode(scripted_task(), epsilon=0.0, cut_at=None)
    text = RENDERER.tokenizer.decode(example.tokens)
    assert text.endswith("<|assistant|>U<|end|>") and len(example.tokens) <= 32


def frozen_lake_task() -> TaskConfig:
    return TaskConfig(
        name="lake",
        env={"id": "frozen_lake", "kwargs": {"size": 4, "max_steps": 12}},
        agent=AgentConfig(max_turns=12, max_tokens_per_turn=1, history="last_k", history_k=0, instructions=False),
    )


def test_frozen_lake_data_spans_outcomes_and_is_deterministic():
    train = RewardTrainConfig(episodes=40, epsilons=[0.0, 1.0], cut_fraction=0.5, seed=3)
    examples = generate_examples([frozen_lake_task()], RENDERER, SAMPLING, train, 48)
    again = generate_examples([frozen_lake_task()], RENDERER, SAMPLING, train, 48)
    assert [(e.tokens, e.progress) for e in examples] == [(e.tokens, e.progress) for e in again]
    experts = [e for e in examples if e.epsilon == 0.0]
    assert all(e.progress == 1.0 for e in experts if e.success)
    assert any(e.success for e in experts) and any(not e.success for e in examples)
    assert all(0.0 <= e.progress <= 1.0 for e in examples)
    assert any(0.0 < e.progress < 1.0 for e in examples)  # partial credit exists
