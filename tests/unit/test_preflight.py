"""Start-up checks: bad envs, bad policy directories and a missing warm start fail in one line, before Ray."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rollarc.config import Config
from rollarc.config.io import validate
from rollarc.models.checkpoint import remove_partial_directories
from rollarc.runtime.entry import run_training
from rollarc.train.preflight import PreflightError, check_envs, check_model_dir, preflight_sft, preflight_train


def config(tmp_path: Path, entry_point: str = "runtime_plugins:ScriptedEnv", **sections: Any) -> Config:
    data: dict[str, Any] = {
        "name": "pf",
        "tasks": [{"name": "t", "env": {"entry_point": entry_point}, "step_timeout_s": 1.0}],
        "sft": {"checkpoint": str(tmp_path / "sft" / "{name}")},
        "run": {"dir": str(tmp_path / "runs"), "progress": False},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return validate(Config, data)


def one_line(err: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_typo_in_an_entry_point_names_the_module_before_ray_starts(tmp_path, nano_policy_dir):
    cfg = config(tmp_path, "runtime_plugnis:ScriptedEnv", model={"path": str(nano_policy_dir)})
    with pytest.raises(PreflightError) as err:
        run_training(cfg)  # would start Ray if the check did not stop it first
    message = one_line(err)
    assert message.startswith("tasks[0].env (t): ") and "cannot import module 'runtime_plugnis'" in message
    assert not (tmp_path / "runs").exists()  # no empty run directory


def test_an_env_that_raises_or_hangs_at_reset_fails_in_one_line():
    cfg = config(Path("."), "runtime_plugins:ScriptedEnv")
    bad_kwarg = cfg.tasks[0].model_copy(update={"env": cfg.tasks[0].env.model_copy(update={"kwargs": {"no_such": 1}})})
    with pytest.raises(PreflightError, match=r"tasks\[0\].env \(t\): .*unknown kwarg\(s\) no_such"):
        check_envs([bad_kwarg], seed=0)
    hanging = cfg.tasks[0].model_copy(
        update={
            "env": cfg.tasks[0].env.model_copy(update={"entry_point": "hang_plugins:HangOnResetEnv"}),
            "step_timeout_s": 0.1,
        }
    )
    with pytest.raises(PreflightError, match=r"longer than 0.2 s .*step_timeout_s"):
        check_envs([hanging], seed=0)


def test_a_task_without_an_expert_asks_for_model_path_or_sft_steps_0(tmp_path, nano_policy_dir, capsys):
    cfg = config(tmp_path, "text_plugins:EchoEnv")
    with pytest.raises(PreflightError) as err:
        preflight_train(cfg, resuming=False, warn=print)
    message = one_line(err)
    assert "tasks[0] (t): the env has no expert_action()" in message
    assert "model.path" in message and "sft.steps=0" in message
    with pytest.raises(PreflightError, match="no expert_action"):
        preflight_sft(cfg, warn=print)
    # Either fix passes; sft.steps=0 warns that RL starts from random weights.
    preflight_train(config(tmp_path, "text_plugins:EchoEnv", model={"path": str(nano_policy_dir)}), False, print)
    preflight_train(config(tmp_path, "text_plugins:EchoEnv", sft={"steps": 0}), False, print)
    assert "sft.steps is 0, so RL starts from the random weights" in capsys.readouterr().out
    # An env with an expert needs neither.
    preflight_train(config(tmp_path), resuming=False, warn=print)


@pytest.fixture()
def broken_policy(nano_policy_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "policy"
    shutil.copytree(nano_policy_dir, path)
    return path


def test_a_good_policy_directory_passes(nano_policy_dir):
    check_model_dir(nano_policy_dir, "model.path")


@pytest.mark.parametrize(
    ("breakage", "problem"),
    [
        ("missing", "does not exist"),
        ("file", "is not a directory"),
        ("empty", "has no config.json"),
        ("config_garbage", "config.json cannot be read"),
        ("config_no_type", "config.json cannot be read"),
        ("weights_garbage", "model.safetensors is not a valid safetensors file"),
        ("weights_truncated", "model.safetensors is not a valid safetensors file"),
        ("weights_missing", "holds no weights"),
        ("weights_wrong_shape", "6 weight(s) have the wrong shape for config.json"),
        ("tokenizer_garbage", "the tokenizer cannot be loaded"),
    ],
)
def test_a_bad_policy_directory_fails_in_one_line_naming_the_key(broken_policy: Path, breakage: str, problem: str):
    path = broken_policy
    weights = path / "model.safetensors"
    if breakage == "missing":
        shutil.rmtree(path)
    elif breakage == "file":
        shutil.rmtree(path)
        path.write_text("not a directory")
    elif breakage == "empty":
        shutil.rmtree(path)
        path.mkdir()
    elif breakage == "config_garbage":
        (path / "config.json").write_text("{not json")
    elif breakage == "config_no_type":
        (path / "config.json").write_text("{}")
    elif breakage == "weights_garbage":
        weights.write_bytes(bytes(range(256)) * 8)
    elif breakage == "weights_truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif breakage == "weights_missing":
        weights.unlink()
    elif breakage == "weights_wrong_shape":
        text = (path / "config.json").read_text()
        (path / "config.json").write_text(text.replace('"intermediate_size": 128', '"intermediate_size": 96'))
    elif breakage == "tokenizer_garbage":
        (path / "tokenizer.json").write_text("{garbage")
    with pytest.raises(PreflightError) as err:
        check_model_dir(path, "model.path")
    message = one_line(err)
    assert message.startswith(f"model.path={path}: {problem}"), message
    assert "set model.path to an HF-format model directory" in message


def test_bad_model_path_stops_training_before_a_run_directory_exists(tmp_path):
    cfg = config(tmp_path, model={"path": str(tmp_path / "nowhere")})
    with pytest.raises(PreflightError, match=r"model.path=.*nowhere: does not exist"):
        run_training(cfg)
    assert not (tmp_path / "runs").exists()


def test_partial_atomic_directories_are_cleaned_and_a_moved_aside_version_is_restored(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for name in ["step_000001", ".step_000002.tmp-1a2b3c4d", ".step_000001.old-5e6f7a8b", ".step_000003.old-0"]:
        (checkpoints / name).mkdir(parents=True)
    (checkpoints / ".step_000003.old-0" / "state.json").write_text("{}")
    removed = remove_partial_directories(checkpoints)
    assert sorted(p.name for p in removed) == [".step_000001.old-5e6f7a8b", ".step_000002.tmp-1a2b3c4d"]
    # step 3 was moved aside and the crash came before its replacement took its place: it is put back.
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001", "step_000003"]
    assert (checkpoints / "step_000003" / "state.json").is_file()


def test_sft_steps_0_needs_no_expert_and_keeps_the_preset_weights(tmp_path):
    from rollarc.train.sft_entry import run_sft

    cfg = config(tmp_path, "text_plugins:EchoEnv", model={"preset": "nano"}, sft={"steps": 0, "eval_episodes": 0})
    path = run_sft(cfg, log=lambda _: None)  # used to raise NoExpert while making demonstrations
    assert (path / "model.safetensors").is_file()
    check_model_dir(path, "sft.checkpoint")
