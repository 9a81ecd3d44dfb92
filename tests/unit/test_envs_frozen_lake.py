"""FrozenLake: the real gymnasium env under a text interface, random solvable maps, BFS expert."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.envs import FrozenLakeEnv, GenerationFailed, play_expert

SMALL = ["SFF", "FHF", "FFG"]


def env_on(lake_map: list[str], **kwargs) -> tuple[FrozenLakeEnv, str]:
    env = FrozenLakeEnv(**kwargs)
    obs, _ = env.reset(seed=0, options={"map": lake_map})
    return env, obs


def test_render_marks_the_player() -> None:
    env, obs = env_on(SMALL)
    assert obs == "PFF\nFHF\nFFG"
    obs, *_ = env.step("D")
    assert obs == "SFF\nPHF\nFFG"


def test_goal_gives_reward_one_after_the_shortest_path() -> None:
    env = FrozenLakeEnv(size=3)
    episode = play_expert(env, options={"map": SMALL})
    assert len(episode.actions) == 4  # S to G on a 3x3 map: 2 down + 2 right, the hole forces no detour
    assert episode.rewards == [0.0, 0.0, 0.0, 1.0]
    assert episode.success and episode.observations[-1] == "SFF\nFHF\nFFP"


def test_expert_takes_the_detour_around_holes() -> None:
    # Holes block the way right, so the path goes down the left column first. Two shortest paths
    # exist after (2,1); ties go to the first move in U, D, L, R order.
    lake = ["SHFF", "FHFF", "FFFH", "HFFG"]
    episode = play_expert(FrozenLakeEnv(size=4), options={"map": lake})
    assert "".join(episode.actions) == "DDRDRR"
    assert episode.success


def test_falling_into_a_hole_ends_without_success() -> None:
    env, _ = env_on(["SH", "FG"], size=2)
    obs, reward, terminated, truncated, info = env.step("R")
    assert obs == "SP\nFG" and reward == 0.0 and terminated and not truncated
    assert info == {"turn": 1, "invalid_action": False, "success": False}
    assert env.expert_action() is None  # the episode is over


def test_walking_into_the_edge_is_a_legal_no_op() -> None:
    env, obs = env_on(SMALL)
    new_obs, reward, terminated, _, info = env.step("U")
    assert new_obs == obs and reward == 0.0 and not terminated and info["invalid_action"] is False


@pytest.mark.parametrize(
    ("mode", "action", "invalid"),
    [
        ("strict", "R", False),
        ("strict", "right", True),
        ("lenient", "right", False),
        ("lenient", " Down. ", False),
        ("strict", "d", True),
        ("lenient", "jump", True),
        ("lenient", "", True),
    ],
)
def test_invalid_actions_cost_and_change_nothing(mode: str, action: str, invalid: bool) -> None:
    env, obs = env_on(SMALL, parse_mode=mode)
    new_obs, reward, _, _, info = env.step(action)
    assert info["invalid_action"] is invalid
    if invalid:
        assert new_obs == "Invalid action. Use U, D, L or R.\n" + obs
        assert reward == -0.1 and env.position == 0


def test_truncation_counts_invalid_turns_too() -> None:
    env, _ = env_on(SMALL, max_steps=2)
    assert env.step("??")[3] is False
    _, _, terminated, truncated, info = env.step("??")
    assert truncated and not terminated and info["success"] is False


def test_maps_differ_per_seed_and_repeat_per_seed() -> None:
    env = FrozenLakeEnv()
    first = [env.reset(seed=seed)[0] for seed in range(20)]
    assert len(set(first)) >= 18
    assert [env.reset(seed=seed)[0] for seed in range(20)] == first
    env.reset(seed=5)
    assert [
        "".join(row.decode() for row in line) for line in env.lake.unwrapped.desc
    ] == env.map  # the real env plays it


@pytest.mark.parametrize("size", [4, 6, 8])
def test_generated_maps_are_solved_by_the_expert(size: int) -> None:
    env = FrozenLakeEnv(size=size, max_steps=4 * size)
    for seed in range(30):
        episode = play_expert(env, seed=seed)
        assert episode.success, (seed, episode.observations[0])
        assert episode.rewards[-1] == 1.0 and sum(episode.rewards) == 1.0
        assert all(env.observation_space.contains(o) for o in episode.observations)


def test_slippery_lake_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[str]:
        env = FrozenLakeEnv(is_slippery=True, max_steps=15)
        observations = [env.reset(seed=seed)[0]]
        for _ in range(15):
            obs, _, terminated, truncated, _ = env.step("R")
            observations.append(obs)
            if terminated or truncated:
                break
        return observations

    assert run(11) == run(11)
    # Slipping moves the player in directions it did not ask for: across seeds, some first steps go down.
    assert any(run(seed)[1].split("\n")[1].startswith("P") for seed in range(20))


def test_given_maps_are_checked() -> None:
    env = FrozenLakeEnv(size=3)
    with pytest.raises(ValueError, match="one S and one G"):
        env.reset(options={"map": ["SFF", "FFF", "FFF"]})
    with pytest.raises(ValueError, match="larger than the env's size=3"):
        env.reset(options={"map": ["SFFF", "FFFF", "FFFF", "FFFG"]})
    with pytest.raises(ValueError, match="S/F/H/G"):
        env.reset(options={"map": ["SX", "FG"]})


def test_impossible_settings_fail_with_the_knobs_named() -> None:
    with pytest.raises(GenerationFailed, match="raise max_steps or frozen_prob"):
        FrozenLakeEnv(size=8, max_steps=5).reset(seed=0)


@settings(max_examples=50, deadline=None)
@given(actions=st.lists(st.text(max_size=10), min_size=1, max_size=6), mode=st.sampled_from(["strict", "lenient"]))
def test_random_action_strings_never_raise(actions: list[str], mode: str) -> None:
    env = FrozenLakeEnv(parse_mode=mode)
    env.reset(seed=1)
    for action in actions:
        position = env.position
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        if info["invalid_action"]:
            assert env.position == position and reward == -0.1
        if terminated or truncated:
            break
