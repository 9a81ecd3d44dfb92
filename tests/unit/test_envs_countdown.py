"""Countdown: the exhaustive solver against brute force, the calculator tool, answer rules, expert."""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.envs import CountdownEnv, GenerationFailed, evaluate, play_expert
from rollarc.envs.base import MAX_ACTION_LENGTH
from rollarc.envs.countdown import parse_action
from rollarc.envs.countdown_solver import reachable, solve


def brute_force(numbers: tuple[int, ...]) -> dict[int, int]:
    """Every value reachable with positive-integer intermediates -> fewest operations (no pruning)."""
    best: dict[int, int] = {}

    def search(values: list[tuple[int, int]]) -> None:  # (value, operations used to build it)
        for value, ops in values:
            if value not in best or ops < best[value]:
                best[value] = ops
        for i, (a, ops_a) in enumerate(values):
            for j, (b, ops_b) in enumerate(values):
                if i == j:
                    continue
                rest = [v for k, v in enumerate(values) if k not in (i, j)]
                ops = ops_a + ops_b + 1
                results = [a + b, a * b] + ([a - b] if a > b else []) + ([a // b] if a % b == 0 else [])
                for result in results:
                    search([*rest, (result, ops)])

    search([(n, 0) for n in numbers])
    return best


@pytest.mark.parametrize("numbers", [(3, 7, 25, 50), (1, 1, 2, 3), (2, 2, 2, 2), (1, 5, 6, 7), (4, 9, 10)])
def test_solver_reaches_exactly_the_brute_force_values_with_fewest_operations(numbers: tuple[int, ...]) -> None:
    expected = brute_force(numbers)
    found = reachable(tuple(sorted(numbers)))
    assert set(found) == set(expected)
    for value, solution in found.items():
        assert len(solution.steps) == expected[value], value
        result = evaluate(solution.expression)
        assert result.value == value
        assert not Counter(result.numbers) - Counter(Fraction(n) for n in numbers)
        for step in solution.steps:  # every calculator step is a whole-number fact
            assert evaluate(step.text).value == step.result


def test_solver_examples() -> None:
    assert solve([3, 7, 25, 50], 75).expression in {"50+25", "25*3"}  # both take one operation
    three = solve([3, 7, 25, 50], 79)
    assert len(three.steps) == 3 and evaluate(three.expression).value == 79
    assert solve([2, 3], 7) is None


def env_on(numbers: list[int], target: int, **kwargs) -> tuple[CountdownEnv, str]:
    env = CountdownEnv(**kwargs)
    obs, _ = env.reset(seed=0, options={"nums": numbers, "target": target})
    return env, obs


def test_calculator_results_are_exact_and_free() -> None:
    env, obs = env_on([3, 7, 25, 50], 79)
    assert obs == "nums 3 7 25 50 target 79"
    assert env.step("<calc>25*3</calc>")[:4] == ("= 75\nnums 3 7 25 50 target 79", 0.0, False, False)
    assert env.step("<calc> 7 / 2 </calc>")[0].startswith("= 7/2\n")
    assert env.step("<calc>999*999*999*999*999*999*999*999</calc>")[4]["invalid_action"] is True  # too large to show


def test_expert_demonstration_calcs_intermediate_steps_then_answers() -> None:
    episode = play_expert(CountdownEnv(), options={"nums": [3, 7, 25, 50], "target": 79})
    solution = solve([3, 7, 25, 50], 79)
    assert episode.actions == [f"<calc>{s.text}</calc>" for s in solution.steps[:-1]] + [
        f"<answer>{solution.expression}</answer>"
    ]
    assert episode.rewards == [0.0, 0.0, 1.0] and episode.success
    assert episode.observations[-1].startswith("correct")


def test_expert_answers_at_once_on_the_last_turn() -> None:
    env, _ = env_on([3, 7, 25, 50], 79, max_steps=2)
    assert env.expert_action().startswith("<calc>")
    env.step("<calc>1+1</calc>")
    assert env.expert_action() == f"<answer>{solve([3, 7, 25, 50], 79).expression}</answer>"


@pytest.mark.parametrize(
    ("answer", "reward", "message"),
    [
        ("<answer>50+25+7-3</answer>", 1.0, "correct"),
        ("<answer>(7-3)+25+50</answer>", 1.0, "correct"),
        ("<answer>50+25+3</answer>", 0.0, "wrong: = 78"),
        ("<answer>25+25+29</answer>", 0.0, "wrong: 25 is not available"),  # 25 given once
        ("<answer>79</answer>", 0.0, "wrong: 79 is not available"),  # numbers must come from the list
    ],
)
def test_answers_end_the_episode(answer: str, reward: float, message: str) -> None:
    env, _ = env_on([3, 7, 25, 50], 79)
    obs, got, terminated, truncated, info = env.step(answer)
    assert (got, terminated, truncated) == (reward, True, False)
    assert obs.split("\n")[0] == message
    assert info["success"] is (reward == 1.0) and info["invalid_action"] is False


def test_exact_arithmetic_allows_fractional_intermediates() -> None:
    env, _ = env_on([2, 6, 7], 21)
    assert env.step("<answer>7/2*6</answer>")[1] == 1.0


@pytest.mark.parametrize(
    ("mode", "action", "invalid"),
    [
        ("strict", "<answer>50+25+7-3</answer>", False),
        ("strict", " <answer>50+25+7-3</answer>", True),
        ("strict", "I think <answer>50+25+7-3</answer>", True),
        ("lenient", "I think <ANSWER> 50+25+7-3 </Answer>.", False),
        ("lenient", "<calc>1+1</calc><answer>3</answer>", False),  # the first tag wins: a calc
        ("lenient", "79", True),
        ("lenient", "<answer>abc</answer>", True),
        ("lenient", "<answer>1/0</answer>", True),
        ("lenient", "<calc>2**99999</calc>", True),
        ("lenient", "<calc>__import__('os').system('true')</calc>", True),
        ("lenient", "<calc>3\u00d77</calc>", True),  # a non-ASCII times sign
        ("lenient", "<calc>1+1" + " " * 100 + "</calc>", True),  # longer than max_action_length
    ],
)
def test_invalid_actions_cost_and_change_nothing(mode: str, action: str, invalid: bool) -> None:
    env, obs = env_on([3, 7, 25, 50], 79, parse_mode=mode)
    new_obs, reward, terminated, _, info = env.step(action)
    assert info["invalid_action"] is invalid
    if invalid:
        assert reward == -0.1 and not terminated
        assert new_obs.endswith("\n" + obs) and env.calculated == set()


def test_truncation_without_an_answer() -> None:
    env, _ = env_on([3, 7, 25, 50], 79, max_steps=2)
    env.step("<calc>1+2</calc>")
    _, _, terminated, truncated, info = env.step("<calc>3+4</calc>")
    assert truncated and not terminated and info["success"] is False


def test_generated_instances_are_solvable_in_range_and_deterministic() -> None:
    env = CountdownEnv(num_count=4, num_min=1, num_max=25, target_min=10, target_max=100)
    tasks = []
    for seed in range(60):
        episode = play_expert(env, seed=seed)
        assert episode.success, episode.observations[0]
        assert 10 <= env.target <= 100 and all(1 <= n <= 25 for n in env.numbers)
        assert env.target not in env.numbers  # at least one operation is needed
        tasks.append(episode.observations[0])
        assert all(env.observation_space.contains(o) for o in episode.observations)
    assert len(set(tasks)) >= 55
    assert [CountdownEnv().reset(seed=s)[0] for s in range(5)] == [CountdownEnv().reset(seed=s)[0] for s in range(5)]


def test_three_numbers_and_bad_settings() -> None:
    episode = play_expert(CountdownEnv(num_count=3), seed=4)
    assert len(episode.observations[0].split()) == 3 + 3 and episode.success
    with pytest.raises(ValueError, match="num_min=9 is greater than num_max=2"):
        CountdownEnv(num_min=9, num_max=2)
    with pytest.raises(GenerationFailed, match="widen the ranges"):
        CountdownEnv(num_count=2, num_min=1, num_max=1, target_min=50, target_max=60).reset(seed=0)
    with pytest.raises(ValueError, match="options\\['nums'\\]"):
        CountdownEnv().reset(options={"nums": [1, 2, 3, 4, 5], "target": 10})


@settings(max_examples=60, deadline=None)
@given(actions=st.lists(st.text(max_size=30), min_size=1, max_size=6), mode=st.sampled_from(["strict", "lenient"]))
def test_random_action_strings_never_raise(actions: list[str], mode: str) -> None:
    env, _ = env_on([3, 7, 25, 50], 79, parse_mode=mode)
    for action in actions:
        obs, reward, terminated, truncated, _info = env.step(action)
        assert env.observation_space.contains(obs)
        assert reward in (-0.1, 0.0, 1.0)
        if terminated or truncated:
            break


@settings(max_examples=80, deadline=None)
@given(
    tag=st.sampled_from(["calc", "answer"]),
    expression=st.one_of(st.text(alphabet="0123456789+-*/() ", max_size=40), st.text(max_size=40)),
)
def test_tagged_random_arithmetic_never_raises(tag: str, expression: str) -> None:
    env, _ = env_on([3, 7, 25, 50], 79)
    obs, *_ = env.step(f"<{tag}>{expression}</{tag}>")
    assert env.observation_space.contains(obs), obs


_OLD_LENIENT = re.compile(r"<\s*(calc|answer)\s*>(.*?)<\s*/\s*\1\s*>", re.DOTALL | re.IGNORECASE)


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(
        st.sampled_from(
            ["<calc>", "</calc>", "< CALC >", "</ calc>", "<answer>", "</Answer >", "<", ">", "/", " ", "1+2"]
        ),
        max_size=12,
    )
)
def test_lenient_parse_equals_the_old_regex(pieces: list[str]) -> None:
    """The linear parser finds exactly what the former (quadratic) regex found."""
    action = "".join(pieces)
    match = _OLD_LENIENT.search(action)
    expected = None if match is None else (match.group(1).lower(), match.group(2))
    assert parse_action(action, "lenient") == expected


@pytest.mark.timeout(20)
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_a_megabyte_action_parses_in_linear_time(mode: str) -> None:
    """Regression: '<calc>' * n took seconds at n = 8000 and minutes at 1 MB (a lazy body with a backreference)."""
    unclosed = "<calc>" * (1_000_000 // 6)
    assert parse_action(unclosed, mode) is None
    closed_at_end = unclosed + "</calc>"
    assert parse_action(closed_at_end, mode) == ("calc", unclosed[len("<calc>") :])
    assert parse_action("<answer>" + "1+" * 500_000 + "1</answer>", mode) == ("answer", "1+" * 500_000 + "1")


def test_max_action_length_has_an_upper_bound() -> None:
    with pytest.raises(ValueError, match="max_action_length"):
        CountdownEnv(max_action_length=MAX_ACTION_LENGTH + 1)
    assert CountdownEnv(max_action_length=MAX_ACTION_LENGTH).action_space.max_length == MAX_ACTION_LENGTH
