"""Sokoban: room rules, optimal solver on hand-made rooms, generation, rewards, invalid actions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.envs import GenerationFailed, SokobanEnv, play_expert
from rollarc.envs.grid_moves import Move
from rollarc.envs.sokoban_room import Room
from rollarc.envs.sokoban_solver import SolverBudgetExceeded, live_cells, plan_text, solve


def room(text: str) -> Room:
    return Room.parse(text)


# ---------------------------------------------------------------- room and solver
def test_render_round_trips_every_symbol() -> None:
    for text in ("#_O\nX*P", "+X_\n#*_"):
        assert room(text).render() == text


def test_parse_rejects_bad_layouts() -> None:
    with pytest.raises(ValueError, match="unknown symbol '\\$'"):
        room("P$O")
    with pytest.raises(ValueError, match="exactly one player"):
        room("PXOP")
    with pytest.raises(ValueError, match="as many targets as boxes"):
        room("PXXO")
    with pytest.raises(ValueError, match="rectangle"):
        room("PXO\n__")


@pytest.mark.parametrize(
    ("layout", "length", "plan"),
    [
        ("PX_O", 2, "RR"),
        # Down first, then left: R, push D, walk R D, push L. Pushing left first would cost 7.
        ("P__\n_X_\nO__", 5, "RDRDL"),
        # Push the box above up, walk L U around it, push R; pushing right first costs 6.
        ("__O\n_X_\n_P_", 4, "ULUR"),
        # Two boxes: push the top one, walk round to push the bottom one (bottom first costs 5).
        ("PXO\n_XO", 4, "RLDR"),
        ("_#___\nPX__O\n_#___", 3, "RRR"),
    ],
)
def test_solver_is_optimal_on_hand_made_rooms(layout: str, length: int, plan: str) -> None:
    found = solve(room(layout))
    assert found is not None
    assert len(found) == length
    assert plan_text(found) == plan


def test_solver_answers_solved_and_impossible_rooms() -> None:
    assert solve(room("P*_")) == []
    assert solve(room("X__\n_P_\n__O")) is None  # box in a corner
    assert solve(room("_X_\nP_O")) is None  # box against the top edge can never go down


def test_live_cells_are_those_a_box_can_leave_towards_the_target() -> None:
    # 3x3 room, target bottom-right: a box on the outer ring (other than the target's row and column
    # towards it) can never be pushed onto the target. Cells: 0 1 2 / 3 4 5 / 6 7 8.
    assert live_cells(room("_X_\n_P_\n__O")) == {4, 5, 7, 8}


def test_solver_budget_fails_loudly() -> None:
    with pytest.raises(SolverBudgetExceeded, match="more than 1000 states"):
        solve(room("_________\n_X_X_X___\n_________\n___P_____\n______OOO"), max_states=1000)


def test_push_rules() -> None:
    pushed, delta = room("PX_O").move(Move.R)
    assert pushed.render() == "_PXO" and delta == 0
    onto, delta = pushed.move(Move.R)
    assert onto.render() == "__P*" and delta == 1 and onto.solved
    for blocked in ("PX#O\n____", "PXX_\nOO__", "P_\nXO"):  # box against a wall, box against a box, edge
        r = room(blocked)
        assert r.move(Move.R if blocked[1] == "X" else Move.U) == (r, 0)


# ---------------------------------------------------------------- env: rewards, blocked and invalid moves
def env_on(layout: str, **kwargs) -> tuple[SokobanEnv, str]:
    env = SokobanEnv(**kwargs)
    obs, info = env.reset(seed=0, options={"layout": layout})
    assert info == {"turn": 0}
    return env, obs


def test_rewards_are_hand_computed() -> None:
    env, obs = env_on("PX_O")
    assert obs == "PX_O"
    obs, reward, terminated, truncated, info = env.step("R")
    assert (obs, reward, terminated, truncated) == ("_PXO", pytest.approx(-0.01), False, False)
    assert info == {"turn": 1, "invalid_action": False}
    obs, reward, terminated, truncated, info = env.step("R")
    assert obs == "__P*"
    assert reward == pytest.approx(-0.01 + 1.0 + 10.0)
    assert terminated and not truncated and info["success"] is True


def test_pushing_a_box_off_a_target_costs() -> None:
    env, _ = env_on("P*_\n_XO")
    obs, reward, *_ = env.step("R")
    assert obs == "_+X\n_XO"  # the player now stands on the emptied target
    assert reward == pytest.approx(-0.01 - 1.0)


def test_reward_settings_are_configurable() -> None:
    env, _ = env_on("PXO", step_penalty=0.0, box_on_target_reward=0.5, solved_reward=2.0)
    assert env.step("R")[1] == pytest.approx(2.5)


def test_blocked_moves_are_legal_no_ops() -> None:
    env, obs = env_on("PX#O\n____")
    for action in ("L", "U", "R"):  # edge, edge, box against a wall
        new_obs, reward, terminated, _, info = env.step(action)
        assert new_obs == obs
        assert reward == pytest.approx(-0.01)
        assert info["invalid_action"] is False and not terminated


@pytest.mark.parametrize("mode", ["strict", "lenient"])
@pytest.mark.parametrize("action", ["", "UU", "U D", "go", "north", "\x00", "U" * 100])
def test_garbage_is_invalid_in_both_modes(mode: str, action: str) -> None:
    env, obs = env_on("PX_O", parse_mode=mode, invalid_penalty=-0.25)
    new_obs, reward, terminated, truncated, info = env.step(action)
    assert new_obs == "Invalid action. Use U, D, L or R.\n" + obs
    assert reward == -0.25
    assert info["invalid_action"] is True and not terminated and not truncated
    assert env.room.render() == obs


@pytest.mark.parametrize("action", ["r", "right", " R ", "Right.", "(R)", "RIGHT!", "\nr\n"])
def test_lenient_accepts_words_case_and_punctuation_strict_does_not(action: str) -> None:
    lenient, _ = env_on("PX_O", parse_mode="lenient")
    assert lenient.step(action)[0] == "_PXO"
    strict, _ = env_on("PX_O", parse_mode="strict")
    assert strict.step(action)[4]["invalid_action"] is True


def test_truncation_at_max_steps() -> None:
    env, _ = env_on("PX_O", max_steps=3, min_solution_moves=1)
    results = [env.step("L") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert results[-1][4]["success"] is False and "success" not in results[0][4]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("R")


# ---------------------------------------------------------------- generation and expert
def test_same_seed_same_episode_different_seeds_different_rooms() -> None:
    actions = ["U", "L", "x", "D", "R", "R"]

    def run(seed: int) -> list[str]:
        env = SokobanEnv()
        observations = [env.reset(seed=seed)[0]]
        observations += [env.step(a)[0] for a in actions]
        return observations

    assert run(7) == run(7)
    rooms = {SokobanEnv().reset(seed=seed)[0] for seed in range(30)}
    assert len(rooms) >= 28


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"num_boxes": 2, "wall_density": 0.2}, {"height": 6, "width": 7, "num_boxes": 2, "max_steps": 40}],
)
def test_generated_rooms_are_solved_optimally_by_the_expert(kwargs: dict) -> None:
    env = SokobanEnv(**kwargs)
    for seed in range(25):
        obs, _ = env.reset(seed=seed)
        optimal = solve(Room.parse(obs))
        assert optimal is not None and len(optimal) >= env.config.min_solution_moves
        episode = play_expert(env, seed=seed)
        assert episode.success, (seed, obs)
        assert len(episode.actions) == len(optimal) <= env.config.max_steps
        assert episode.rewards[-1] >= env.config.solved_reward - 1
        assert all(env.observation_space.contains(o) for o in episode.observations)


def test_expert_recovers_from_a_detour() -> None:
    env = SokobanEnv(num_boxes=2)
    for seed in range(10):
        env.reset(seed=seed)
        for action in ("U", "L", "D"):
            if env.step(action)[2]:
                break
        else:
            before = solve(env.room)
            if before is None:  # the detour made a deadlock: the expert says so
                assert env.expert_action() is None
                continue
            move = env.expert_action()
            assert move is not None
            after = solve(env.room.move(Move[move])[0])
            assert after is not None and len(after) == len(before) - 1


def test_generation_failure_names_the_settings() -> None:
    env = SokobanEnv(height=2, width=2, num_boxes=1, min_solution_moves=5, max_steps=5)
    with pytest.raises(GenerationFailed, match="2x2 sokoban room"):
        env.reset(seed=0)


def test_given_layouts_must_fit_the_configured_size() -> None:
    with pytest.raises(ValueError, match="larger than the env's height x width = 2x5"):
        SokobanEnv(height=2).reset(options={"layout": "P\nX\nO"})


def test_bad_kwargs_are_named() -> None:
    with pytest.raises(ValueError, match="widht"):
        SokobanEnv(widht=5)
    with pytest.raises(ValueError, match="num_boxes"):
        SokobanEnv(num_boxes=0)
    with pytest.raises(ValueError, match="does not fit"):
        SokobanEnv(height=2, width=2, num_boxes=3)


@settings(max_examples=60, deadline=None)
@given(actions=st.lists(st.text(max_size=12), min_size=1, max_size=8), mode=st.sampled_from(["strict", "lenient"]))
def test_random_action_strings_never_raise(actions: list[str], mode: str) -> None:
    env = SokobanEnv(parse_mode=mode)
    env.reset(seed=3)
    for action in actions:
        before = env.room
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        if info["invalid_action"]:
            assert env.room == before and reward == env.config.invalid_penalty
        if terminated or truncated:
            break
