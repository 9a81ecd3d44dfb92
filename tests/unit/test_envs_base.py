"""The TextEnv contract shared by every built-in env: spaces, info keys, misuse errors, move parsing."""

from __future__ import annotations

import pytest

from rollarc.envs import CHARSET, CountdownEnv, FrozenLakeEnv, Move, SokobanEnv, parse_move, play_expert
from rollarc.models.tokenizer import CHARACTERS, UNK, build_tokenizer

ENVS = [SokobanEnv, FrozenLakeEnv, CountdownEnv]


def test_charset_is_the_tokenizers_and_env_text_never_hits_unk() -> None:
    assert sorted(CHARSET) == sorted(CHARACTERS)
    tokenizer = build_tokenizer()
    unk = tokenizer.convert_tokens_to_ids(UNK)
    for cls in ENVS:
        env = cls()
        episode = play_expert(env, seed=0)
        texts = episode.observations + episode.actions + [cls.instructions, cls.invalid_hint]
        for text in texts:
            assert unk not in tokenizer(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize("cls", ENVS)
def test_info_keys_and_spaces(cls: type) -> None:
    env = cls(max_steps=2, **({"size": 2} if cls is FrozenLakeEnv else {}))  # a 2x2 lake is solvable in 2
    obs, info = env.reset(seed=0)
    assert info == {"turn": 0} and env.observation_space.contains(obs)
    assert env.action_space.contains(env.expert_action())
    _, _, _, _, info = env.step("???")
    assert info == {"turn": 1, "invalid_action": True}
    _, _, _, truncated, info = env.step("???")
    assert truncated and info == {"turn": 2, "invalid_action": True, "success": False}
    assert env.expert_action() is None  # nothing to do once the episode is over


@pytest.mark.parametrize("cls", ENVS)
def test_misuse_is_a_clear_error(cls: type) -> None:
    env = cls()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("U")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="takes the reply text \\(str\\), got int"):
        env.step(3)
    with pytest.raises(ValueError, match="render_mode must be None or 'ansi'"):
        cls(render_mode="human")


@pytest.mark.parametrize("cls", ENVS)
def test_ansi_render_is_the_current_observation(cls: type) -> None:
    env = cls(render_mode="ansi")
    obs, _ = env.reset(seed=2)
    assert env.render() == obs
    assert cls().render() is None


def test_replies_longer_than_max_action_length_are_invalid() -> None:
    env = SokobanEnv(max_action_length=4)
    env.reset(seed=0)
    assert env.step("  U  ")[4]["invalid_action"] is True
    assert env.step(" U ")[4]["invalid_action"] is False


@pytest.mark.parametrize(
    ("text", "strict", "lenient"),
    [
        ("U", Move.U, Move.U),
        ("u", None, Move.U),
        ("Up", None, Move.U),
        ("DOWN", None, Move.D),
        (" left.", None, Move.L),
        ("'R'", None, Move.R),
        ("R R", None, None),
        ("", None, None),
        ("rightward", None, None),
        ("UP!?", None, Move.U),
    ],
)
def test_parse_move(text: str, strict: Move | None, lenient: Move | None) -> None:
    assert parse_move(text, "strict") is strict
    assert parse_move(text, "lenient") is lenient


def test_moves() -> None:
    assert [m.opposite for m in Move] == [Move.D, Move.U, Move.R, Move.L]
    assert (Move.L.dr, Move.L.dc) == (0, -1)
