"""The generated configuration reference: every key described, every key listed, the page up to date."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from rollarc.cli import main
from rollarc.config import Config, RoleConfig
from rollarc.config.docs import reachable_models, render, sections, stale_message
from rollarc.envs.latency import LatencyConfig
from rollarc.rewards.config import JudgeArchConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _models_in(annotation: typing.Any) -> list[type[BaseModel]]:
    """Config models anywhere inside an annotation (``X``, ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _dotted_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key below ``model``, walked independently of the generator."""
    keys = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        keys.append(key)
        origins = {typing.get_origin(a) for a in [field.annotation, *typing.get_args(field.annotation)]}
        suffix = "[i]" if list in origins else ".<name>" if dict in origins else ""  # also inside `X | None`
        for child in _models_in(field.annotation):
            keys += _dotted_keys(child, f"{key}{suffix}.")
    return keys


def _all_models(model: type[BaseModel]) -> set[type[BaseModel]]:
    found = {model}
    for field in model.model_fields.values():
        for child in _models_in(field.annotation):
            found |= _all_models(child)
    return found


def test_every_field_of_every_config_model_has_a_description():
    models = _all_models(Config)
    assert {RoleConfig, LatencyConfig, JudgeArchConfig} <= models  # the walk reaches the deep sections
    assert models == set(reachable_models())
    missing = [
        f"{m.__module__}.{m.__name__}.{name}"
        for m in models
        for name, f in m.model_fields.items()
        if not (f.description or "").strip()
    ]
    assert not missing, "config fields without Field(description=...): " + ", ".join(sorted(missing))


def test_page_lists_every_dotted_key():
    text = render()
    keys = _dotted_keys(Config)
    assert len(keys) > 150
    absent = [key for key in keys if f"| `{key}` |" not in text]
    assert not absent, absent
    assert "cluster.pools.<name>.count" in keys and "tasks[i].agent.max_turns" in keys


def test_checked_in_page_is_up_to_date():
    current = PAGE.read_text() if PAGE.is_file() else None
    message = stale_message(PAGE, current, render())
    assert message is None, message + " (the page is generated from the config models' Field descriptions)"


def _row(key: str) -> list[str]:
    (row,) = [r for s in sections() for r in s.rows if r.key == key]
    return [row.type, row.default, row.constraints, row.description]


def test_defaults_bounds_and_choices_of_hand_picked_keys():
    assert _row("async.on_stale")[:3] == ["str", "`drop`", "one of `drop`, `restart`"]
    assert _row("train.group_size")[:3] == ["int", "`8`", ">= 2"]
    assert _row("sampling.top_p")[:3] == ["float", "`1.0`", "> 0.0; <= 1.0"]
    assert _row("algo.decoupled_cap")[:3] == ["float or null", "`null`", "> 1; finite"]
    assert _row("sync.dtype")[:3] == ["str or null", "`null`", "one of `bfloat16`, `float16`, `float32`"]
    assert _row("tasks[i].name")[1:3] == ["required", "matches `^[A-Za-z0-9_.-]+$`"]
    assert _row("reward.train.epsilons")[1:3] == ["`[0.0, 0.1, 0.25, 0.5, 1.0]`", "at least 1 item(s)"]
    # Effective defaults at their place: RolesConfig builds the reward role with 0 replicas.
    assert _row("cluster.roles.reward.replicas")[1] == "`0`"
    assert _row("cluster.roles.train.pool")[1] == "`compute`"
    assert _row("cluster.roles.rollout[i].pool")[1] == "required"
    assert _row("async")[0] == "section"


def test_rendering_is_deterministic_and_in_declaration_order():
    assert render() == render()
    paths = [s.path for s in sections()]
    assert paths[:4] == ["", "model", "model.lora", "tasks[i]"]  # a nested section follows its parent
    assert paths.index("cluster") < paths.index("cluster.pools.<name>") < paths.index("cluster.roles.reward")


def test_cli_writes_the_page_and_check_reports_staleness(tmp_path, capsys):
    out = tmp_path / "configuration.md"
    assert main(["config", "docs", "--check", "--out", str(out)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["config", "docs", "--out", str(out)]) == 0
    assert out.read_text() == render()
    assert main(["config", "docs", "--check", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace("B: GRPO groups per training step", "B: groups"))
    capsys.readouterr()
    assert main(["config", "docs", "--check", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "is out of date" in err and "run `rollarc config docs`" in err


def test_cli_refuses_an_out_path_in_a_missing_directory(tmp_path, capsys):
    assert main(["config", "docs", "--out", str(tmp_path / "nowhere" / "configuration.md")]) == 2
    assert "does not exist" in capsys.readouterr().err
