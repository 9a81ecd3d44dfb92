"""A reused SFT warm start must have been trained with the run's SFT settings (regression: configs/serverless_reward.yaml
reused the quickstart's warm start with sft.steps 60 against its 100, so whichever ran first decided both starts)."""

import json
from pathlib import Path

import pytest

from rollarc.config import load_train_config
from rollarc.train.preflight import PreflightError, check_sft_settings
from rollarc.train.sft_settings import changed_settings, sft_settings

REPO = Path(__file__).resolve().parents[2]


def test_changed_settings_lists_each_changed_key_in_order_and_ignores_unrecorded_ones():
    recorded = {"sft.steps": 100, "sft.lr": 0.001, "seed": 0, "tasks": ["a"]}
    current = {"sft.steps": 60, "sft.lr": 0.001, "seed": 1, "tasks": ["a"], "sft.new_key": 3}
    assert changed_settings(recorded, current) == ["seed: 0 -> 1", "sft.steps: 100 -> 60"]
    assert changed_settings(recorded, recorded) == []


def test_the_settings_are_those_that_decide_the_weights():
    cfg = load_train_config(REPO / "configs" / "quickstart.yaml", ["sft.threads=2", "sft.eval_episodes=7"])
    settings = sft_settings(cfg)
    assert settings["sft.steps"] == 100 and settings["sft.episodes"] == 1000 and settings["seed"] == 0
    assert settings["model.preset"] == cfg.model.preset and settings["tasks"] == [t.name for t in cfg.tasks]
    assert not any("threads" in k or "eval_episodes" in k or "checkpoint" in k for k in settings)
    other = load_train_config(REPO / "configs" / "quickstart.yaml", ["sft.steps=120", "model.init_seed=3"])
    assert changed_settings(settings, sft_settings(other)) == ["model.init_seed: 0 -> 3", "sft.steps: 100 -> 120"]


def test_another_env_under_the_same_task_name_is_another_warm_start():
    """Regression: only task names were recorded, so configs/gentail.yaml's warm start, trained on `copy`, would have
    been reused after the task switched to `repeat` under the same name."""
    copy = load_train_config(REPO / "configs" / "gentail.yaml", ["tasks.0.env.kwargs.op=copy"])
    repeat = load_train_config(REPO / "configs" / "gentail.yaml", ["tasks.0.env.kwargs.op=repeat"])
    (changed,) = changed_settings(sft_settings(copy), sft_settings(repeat))
    assert changed.startswith("task_envs: [") and "'op': 'copy'" in changed and "'op': 'repeat'" in changed


def test_every_shipped_config_sharing_a_warm_start_trains_it_the_same_way():
    by_dir: dict[str, dict] = {}
    for path in sorted((REPO / "configs").glob("*.yaml")):
        try:
            cfg = load_train_config(path, [])
        except ValueError:  # not a train config (serve, t2i, ...)
            continue
        settings = sft_settings(cfg)
        first = by_dir.setdefault(str(cfg.sft_checkpoint()), settings)
        assert changed_settings(first, settings) == [], path.name


def write_meta(sft_dir: Path, meta: object) -> None:
    sft_dir.mkdir(parents=True, exist_ok=True)
    (sft_dir / "sft_meta.json").write_text(json.dumps(meta))


def test_a_warm_start_made_with_other_settings_fails_in_one_line_naming_them(tmp_path):
    cfg = load_train_config(REPO / "configs" / "quickstart.yaml", [f"sft.checkpoint={tmp_path / 'sft'}"])
    write_meta(tmp_path / "sft", {"steps": 120, "settings": {**sft_settings(cfg), "sft.steps": 120, "sft.lr": 0.01}})
    with pytest.raises(PreflightError) as err:
        check_sft_settings(cfg, tmp_path / "sft")
    message = str(err.value)
    assert "\n" not in message and "sft.lr: 0.01 -> 0.001; sft.steps: 120 -> 100" in message
    assert f"delete {tmp_path / 'sft'}" in message


def test_a_matching_or_older_warm_start_is_reused(tmp_path):
    cfg = load_train_config(REPO / "configs" / "quickstart.yaml", [f"sft.checkpoint={tmp_path / 'sft'}"])
    write_meta(tmp_path / "sft", {"steps": 100, "settings": sft_settings(cfg)})
    check_sft_settings(cfg, tmp_path / "sft")
    write_meta(tmp_path / "sft", {"steps": 100})  # recorded before settings were
    check_sft_settings(cfg, tmp_path / "sft")
    (tmp_path / "sft" / "sft_meta.json").unlink()
    check_sft_settings(cfg, tmp_path / "sft")


def test_an_unreadable_meta_fails_in_one_line(tmp_path):
    cfg = load_train_config(REPO / "configs" / "quickstart.yaml", [f"sft.checkpoint={tmp_path / 'sft'}"])
    write_meta(tmp_path / "sft", ["not", "a", "mapping"])
    with pytest.raises(PreflightError, match=r"sft_meta\.json is unreadable"):
        check_sft_settings(cfg, tmp_path / "sft")
