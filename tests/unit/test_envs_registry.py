"""Env registry: built-in ids, the plugin contract by import path, and clear load errors."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
from gymnasium.spaces import Text
from gymnasium.wrappers import TimeLimit

from rollarc.config.io import ConfigError, load_config
from rollarc.envs import (
    CountdownEnv,
    EnvLoadError,
    EnvSpec,
    FrozenLakeEnv,
    SokobanEnv,
    expert_action,
    instructions,
    make_env,
    play_expert,
    register,
    registered_ids,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tests" / "plugins"))


def test_builtin_ids() -> None:
    assert {"sokoban", "frozen_lake", "countdown"} <= set(registered_ids())
    for env_id, cls in [("sokoban", SokobanEnv), ("frozen_lake", FrozenLakeEnv), ("countdown", CountdownEnv)]:
        env = make_env(EnvSpec(id=env_id, kwargs={"max_steps": 12}))
        assert type(env) is cls and env.config.max_steps == 12
        assert isinstance(env.observation_space, Text) and isinstance(env.action_space, Text)
        assert instructions(env) == cls.instructions != ""
        assert play_expert(env, seed=0).success


def test_spec_needs_exactly_one_of_id_and_entry_point() -> None:
    with pytest.raises(ValueError, match="exactly one of env id"):
        EnvSpec()
    with pytest.raises(ValueError, match="exactly one of env id"):
        EnvSpec(id="sokoban", entry_point="a.b:C")
    with pytest.raises(ValueError, match="unknown env id 'sokobahn'; registered ids: countdown"):
        EnvSpec(id="sokobahn")
    with pytest.raises(ValueError, match=r"must look like 'package\.module:Class'"):
        EnvSpec(entry_point="just_a_module")
    with pytest.raises(ValueError, match="kwarg\n  Extra inputs are not permitted"):
        EnvSpec(id="sokoban", kwarg={})  # a typo of a spec key: unknown keys are rejected


def test_spec_loads_from_yaml_with_dotted_errors(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("id: countdown\nkwargs: {num_count: 3}\n")
    spec = load_config(EnvSpec, path, ["kwargs.max_steps=4"])
    assert spec.kwargs == {"num_count": 3, "max_steps": 4}
    with pytest.raises(ConfigError, match="ident: unknown key; allowed keys here: id, entry_point, kwargs"):
        load_config(EnvSpec, path, ["ident=x"])


def test_make_env_accepts_a_mapping() -> None:
    env = make_env({"id": "frozen_lake", "kwargs": {"size": 4}})
    assert env.reset(seed=0)[0].count("\n") == 3


def test_plugin_by_entry_point_without_extras(plugins: None) -> None:
    env = make_env(EnvSpec(entry_point="text_plugins:EchoEnv", kwargs={"word": "hi"}))
    assert env.reset(seed=0) == ("hi", {})
    assert env.step("hi")[1] == 1.0
    assert expert_action(env) is None and instructions(env) == ""


def test_plugin_factory_entry_point(plugins: None) -> None:
    env = make_env(EnvSpec(entry_point="text_plugins:make_echo"))
    assert env.reset()[0] == "factory"


def test_register_a_plugin_id(plugins: None) -> None:
    register("test_echo", "text_plugins:EchoEnv")
    register("test_echo", "text_plugins:EchoEnv")  # the same registration again is harmless
    assert "test_echo" in registered_ids()
    assert make_env(EnvSpec(id="test_echo")).reset()[0] == "hello"
    with pytest.raises(ValueError, match="already registered for 'text_plugins:EchoEnv'"):
        register("test_echo", "text_plugins:DiscreteEnv")
    with pytest.raises(ValueError, match="must look like"):
        register("bad", "no_colon")


def test_example_plugin_plays_with_its_expert(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    env = make_env(EnvSpec(entry_point="guess_number_env:GuessNumberEnv", kwargs={"high": 50}))
    assert not hasattr(env, "config")  # a plain gymnasium.Env, not a TextEnv
    assert instructions(env).startswith("Guess")
    episode = play_expert(env, seed=3)
    assert episode.success and len(episode.actions) <= 6  # binary search over 50 numbers
    assert episode.observations[0] == "guess 1-50"


def test_helpers_see_through_wrappers() -> None:
    env = TimeLimit(SokobanEnv(), max_episode_steps=50)
    env.reset(seed=0)
    assert expert_action(env) in {"U", "D", "L", "R"}
    assert instructions(env).startswith("Sokoban")


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"),
        ("text_plugins:Missing", "module 'text_plugins' has no attribute 'Missing'"),
        ("text_plugins:NotAnEnv", "class NotAnEnv, which is not a gymnasium.Env subclass"),
        ("text_plugins:DiscreteEnv", "observation_space Discrete(4); rollarc needs gymnasium.spaces.Text"),
        ("text_plugins:make_not_an_env", "returned a str, not a gymnasium.Env"),
        ("text_plugins:NOT_CALLABLE", "is a int, neither a gymnasium.Env class nor a factory"),
    ],
)
def test_load_errors_name_the_entry_point(plugins: None, entry_point: str, message: str) -> None:
    with pytest.raises(EnvLoadError) as caught:
        make_env(EnvSpec(entry_point=entry_point))
    assert f"env entry point {entry_point!r}" in str(caught.value)
    assert message in str(caught.value)


def test_kwarg_errors_name_the_env_and_the_kwarg(plugins: None) -> None:
    with pytest.raises(EnvLoadError, match=r"'text_plugins:EchoEnv' got unknown kwarg\(s\) wrd; it accepts: word"):
        make_env(EnvSpec(entry_point="text_plugins:EchoEnv", kwargs={"wrd": "x"}))
    with pytest.raises(
        EnvLoadError, match=r"(?s)env 'sokoban' \(rollarc.envs.sokoban:SokobanEnv\) rejected .*widht: unknown key"
    ):
        make_env(EnvSpec(id="sokoban", kwargs={"widht": 5}))
    with pytest.raises(EnvLoadError, match=r"(?s)rejected .*height: Input should be greater than or equal to 2"):
        make_env(EnvSpec(id="sokoban", kwargs={"height": 1}))
    with pytest.raises(EnvLoadError, match=r"(?s)rejected .*parse_mode: Input should be 'strict' or 'lenient'"):
        make_env(EnvSpec(id="countdown", kwargs={"parse_mode": "loose"}))


def test_every_builtin_is_a_gymnasium_env() -> None:
    for env_id in ("sokoban", "frozen_lake", "countdown"):
        assert isinstance(make_env(EnvSpec(id=env_id)), gymnasium.Env)
