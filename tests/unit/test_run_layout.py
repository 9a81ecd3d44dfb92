"""One run-directory format for both kinds of run (rollarc/runtime/run_dir.py), checked without Ray.

The end-to-end runs check the same with ``layout_problems``: tests/integration/test_runtime.py (LLM) and
tests/integration/test_t2i_train.py (t2i).
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import pytest

from rollarc.config import load_train_config
from rollarc.config.io import ConfigError
from rollarc.diffusion.config import load_t2i_config
from rollarc.diffusion.controller import T2IController, T2IWorkers
from rollarc.report.config_fingerprint import canonical_json
from rollarc.report.run_dir import read_summary
from rollarc.runtime.run_dir import (
    HISTORY,
    LAYOUT,
    SUMMARY_KEYS,
    config_dict,
    finished,
    latest_checkpoint,
    layout_problems,
    new_run_dir,
    partial_summary,
    record_new_run,
    resume_point,
    stop_summary,
    write_summary,
)
from rollarc.runtime.stop_signals import RunStopped

LLM, T2I = "configs/quickstart.yaml", "configs/t2i_quickstart.yaml"


def _configs(tmp_path: Path) -> dict[str, object]:
    return {
        "llm": load_train_config(LLM, [f"run.dir={tmp_path}"]),
        "t2i": load_t2i_config(T2I, [f"run.dir={tmp_path}"]),
    }


def test_both_kinds_record_a_new_run_the_same_way(tmp_path):
    for kind, cfg in _configs(tmp_path).items():
        run = new_run_dir(tmp_path, f"x-{kind}")
        record_new_run(run, cfg)  # type: ignore[arg-type]
        assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "fingerprint.json"], kind
        digest = hashlib.sha256(canonical_json(config_dict(cfg)).encode()).hexdigest()  # type: ignore[arg-type]
        assert json.loads((run / "fingerprint.json").read_text()) == {"config_sha256": digest}, kind
    again = new_run_dir(tmp_path, "x-llm")  # same name, same second: a suffix, never the same directory
    assert again.is_dir() and again.name.startswith("x-llm-") and len(list(tmp_path.glob("x-llm-*"))) == 2


def test_t2i_and_llm_summaries_carry_the_same_keys(tmp_path):
    cfg = load_t2i_config(T2I, [f"run.dir={tmp_path}"])
    controller = T2IController(cfg, tmp_path, T2IWorkers(None, None, None), ["p"], ["q"], None)  # type: ignore[arg-type]
    t2i = finished(controller.summary(), start=0.0, resumes=0)
    llm_started = partial_summary({"steps": 3}, "it", "SIGTERM", start=0.0, resumes=2)  # stopped while starting
    t2i_stopped = partial_summary(controller.summary(), cfg.name, "SIGINT", start=0.0, resumes=1)
    for summary in (t2i, llm_started, t2i_stopped):
        assert set(SUMMARY_KEYS) <= set(summary)
    assert (t2i["status"], t2i["stop_reason"], t2i["name"], t2i["steps"]) == ("completed", None, "t2i-quickstart", 0)
    assert (llm_started["status"], llm_started["stop_reason"], llm_started["resumes"]) == ("stopped", "SIGTERM", 2)
    assert llm_started["evals"] == [] and llm_started["steps"] == 3
    write_summary(tmp_path, t2i)  # through the Summary schema: t2i's own counts are kept as extras
    record = read_summary(tmp_path)
    assert record is not None and record.name == "t2i-quickstart" and record.extra["sampled_images"] == 0


def _checkpoint(run: Path, step: int, digits: int = 6) -> Path:
    path = run / "checkpoints" / f"step_{step:0{digits}d}"
    path.mkdir(parents=True)
    (path / "state.json").write_text(json.dumps({"step": step, "version": step}))
    return path


def test_latest_checkpoint_orders_by_step_and_skips_unfinished(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    _checkpoint(tmp_path, 9, digits=5)  # written by an older t2i run
    latest = _checkpoint(tmp_path, 10)
    (tmp_path / "checkpoints" / "step_000011").mkdir()  # no state.json: not complete
    (tmp_path / "checkpoints" / ".step_000012.tmp-1a2b3c4d").mkdir()
    assert latest_checkpoint(tmp_path) == latest  # "step_000010" < "step_00009" by name: ordered by number


def test_layout_problems_names_what_is_missing(tmp_path):
    assert layout_problems(tmp_path) == [f"no {name}" for name in LAYOUT]
    for name in LAYOUT:
        (tmp_path / name).write_text("{}")
    assert layout_problems(tmp_path) == [f"summary.json has no {key!r}" for key in SUMMARY_KEYS]
    write_summary(tmp_path, partial_summary({"steps": 1}, "x", "SIGINT", start=0.0, resumes=0))
    _checkpoint(tmp_path, 1)
    assert layout_problems(tmp_path) == []
    _checkpoint(tmp_path, 2, digits=5)
    (tmp_path / "checkpoints" / "step_000003").mkdir()
    assert layout_problems(tmp_path) == [  # in name order
        "checkpoints/step_000003 has no state.json",
        "checkpoints/step_00002 is not named step_000000 and so on",
    ]


def test_a_t2i_resume_is_checked_and_recorded_as_an_llm_resume(tmp_path):
    cfg = load_t2i_config(T2I, [f"run.dir={tmp_path}"])
    run = new_run_dir(tmp_path, cfg.name)
    record_new_run(run, cfg)
    with pytest.raises(ConfigError, match=r"no checkpoint found"):
        resume_point(load_t2i_config(T2I, [f"run.dir={tmp_path}", f"resume={run}"]))
    _checkpoint(run, 4)
    with pytest.raises(ConfigError, match=r"train\.lr \(0\.0003 -> 0\.1\)"):
        resume_point(load_t2i_config(T2I, [f"run.dir={tmp_path}", f"resume={run}", "train.lr=0.1"]))
    point = resume_point(load_t2i_config(T2I, [f"run.dir={tmp_path}", f"resume={run}", "train.steps=50"]))
    assert (point.run_dir, point.checkpoint.name, point.state["version"], point.resumes) == (run, "step_000004", 4, 1)
    assert load_t2i_config(str(run / "config.yaml")) == cfg  # config.yaml is never rewritten
    assert load_t2i_config(str(run / "config.resume-1.yaml")).train.steps == 50
    (entry,) = [json.loads(line) for line in (run / HISTORY).read_text().splitlines()]
    assert entry["changed"] == {"train.steps": {"from": 40, "to": 50}} and entry["checkpoint"] == "step_000004"


def test_a_stop_signal_records_the_last_checkpoint_and_the_resume_command(tmp_path, capsys):
    _checkpoint(tmp_path, 3)
    (tmp_path / "checkpoints" / ".step_000004.tmp-1a2b3c4d").mkdir()  # the save the signal interrupted
    code = stop_summary(tmp_path, RunStopped(signal.SIGTERM), partial_summary({"steps": 3}, "x", "SIGTERM", 0.0, 0))
    assert code == 143
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["last_checkpoint_step"] == 3 and summary["removed_partial_checkpoints"] == [
        ".step_000004.tmp-1a2b3c4d"
    ]
    assert f"resume with: rollarc train {tmp_path / 'config.yaml'} resume={tmp_path}" in capsys.readouterr().err


def test_rollarc_report_rebuilds_a_t2i_run_too(tmp_path):
    from rollarc.cli import main

    cfg = load_t2i_config(T2I, [f"run.dir={tmp_path}"])
    run = new_run_dir(tmp_path, cfg.name)
    record_new_run(run, cfg)
    row = {"step": 1, "reward": 0.25, "low_contrast_fraction": 0.5}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    evals = [{"step": 0, "reward": 0.5, "rl_wall_s": 0.0}]
    write_summary(run, partial_summary({"steps": 1, "evals": evals}, cfg.name, "SIGINT", 0.0, 0))
    assert main(["report", str(run)]) == 0  # the LLM report would need timeline spans and "version" in evals
    report = (run / "report.md").read_text()
    assert "**The run stopped early:** SIGINT" in report and "Held-out reward n/a before RL" in report
    assert (run / "learning_curve.png").stat().st_size > 0
