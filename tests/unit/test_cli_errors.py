"""Small CLI mistakes end in one line on stderr and exit code 2, never a traceback or a NaN result."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollarc.cli import main


@pytest.fixture()
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    data = {
        "name": "cli",
        "tasks": [{"name": "t", "env": {"entry_point": "runtime_plugins:ScriptedEnv"}}],
        "sft": {"checkpoint": str(tmp_path / "sft")},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def only_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_eval_with_a_missing_checkpoint_is_one_line_and_exit_2(config_file, capsys):
    assert main(["eval", str(config_file), "--checkpoint", "/nonexistent"]) == 2
    line = only_line(capsys.readouterr().err)
    assert line.startswith("rollarc: --checkpoint=/nonexistent: does not exist; set --checkpoint to an HF-format")


def test_eval_without_any_policy_says_how_to_get_one(config_file, capsys):
    assert main(["eval", str(config_file)]) == 2
    line = only_line(capsys.readouterr().err)
    assert "sft.checkpoint=" in line and "pass --checkpoint DIR, set model.path, or train the warm start" in line


@pytest.mark.parametrize("episodes", ["-5", "0", "many"])
def test_eval_episodes_must_be_a_positive_whole_number(config_file, capsys, episodes):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(config_file), "--episodes", episodes])
    assert exit_.value.code == 2
    assert "argument --episodes: expected a whole number >= 1" in capsys.readouterr().err


def test_eval_with_zero_configured_episodes_is_refused(config_file, capsys):
    assert main(["eval", str(config_file), "train.eval_episodes=0"]) == 2
    assert "train.eval_episodes is 0" in only_line(capsys.readouterr().err)


def test_a_config_path_that_is_a_directory_says_so(tmp_path, capsys):
    assert main(["config", "show", str(tmp_path)]) == 2
    assert only_line(capsys.readouterr().err) == f"rollarc: config file {tmp_path} is a directory, not a YAML file"


def test_report_of_a_missing_run_directory_is_one_line(capsys):
    assert main(["report", "/nonexistent"]) == 2
    assert "/nonexistent is not a directory" in only_line(capsys.readouterr().err)
