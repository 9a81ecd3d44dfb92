"""``rollarc report RUN_DIR`` on a synthetic run directory written with the runtime's schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rollarc.cli import main
from rollarc.config import Config
from rollarc.config.io import dump_yaml, validate
from rollarc.report.build import ReportError, build_report, composition_series
from rollarc.report.run_dir import read_metrics


def _eval(label: str, version: int, success: float, lake: float, box: float) -> dict:
    return {
        "label": label,
        "version": version,
        "episodes": 200,
        "success": success,
        "reward": success - 0.5,
        "failed": 1,
        "per_task": {"lake": lake, "box": box},
        "seconds": 3.0,
        "wall_s": 1.0 + version,
    }


def _step(step: int, success: float, reward: float, **extra: float) -> dict:
    """One metrics.jsonl line as step_report.step_record and batch_info write it (the keys the report reads)."""
    return {
        "step": step,
        "version": step,
        "wall_s": 2.0 * step,
        "step_time_s": 2.0 + step,
        "train_s": 0.5,
        "sync_s": 0.1,
        "tokens": 900,
        "gen_tok_s": 100.0 * step,
        "trajectories_per_s": 8.0,
        "buffer_groups": 0,
        "trajectories": 16,
        "reward": reward,
        "success": success,
        "turns": 5.0,
        "staleness_hist": {"0": 16},
        "staleness_max": step - 1,
        "per_task": {},
        "loss": 0.1 * step,
        "groups_trained": 2 * step,
        **extra,
    }


SPANS = [  # (role, worker, kind, t0, t1); RL window [0, 10]
    ("train", "trainer", "train", 2.0, 4.0),
    ("train", "trainer", "train", 6.0, 8.0),  # busy 4 s: bubble 0.6
    ("rollout", "rollout-0", "generate", 0.0, 5.0),
    ("rollout", "rollout-0", "generate", 4.0, 9.0),  # 9 s: 0.1
    ("env", "env-0", "env_step", 0.0, 10.0),
    ("env", "env-1", "env_step", 0.0, 5.0),  # 0.0 and 0.5: 0.25
    ("controller", "controller", "eval", 0.0, 10.0),  # evaluation: left out
]


def _summary() -> dict:
    evals = [
        _eval("before_rl", 0, 0.315, 0.4, 0.23),
        _eval("step_2", 2, 0.37, 0.45, 0.29),
        _eval("after_rl", 3, 0.42, 0.5, 0.34),
    ]
    return {
        "name": "demo",
        "mode": "async",
        "max_staleness": 2,
        "steps": 3,
        "wall_s": 61.5,
        "rl_wall_s": 10.0,
        "rl_window": [0.0, 10.0],
        "trajectories_trained": 48,
        "trajectories_per_s": 4.8,
        "heldout_success_before_rl": 0.315,
        "heldout_success_after_rl": 0.42,
        "signal_groups_frac_mean": 0.625,
        "heldout_episodes": 200,
        "evals": evals,
        "max_buffer_groups": 3,
        "max_in_flight_groups_bound": 6,
        "last_checkpoint": "ck",
        "routing": {"dead_replicas": ["rollout-1"], "failovers": 2},
        "groups_started": 29,
        "groups_trained": 24,
        "dropped_stale_groups": 3,
        "restarted_stale_groups": 0,
        "dropped_failed_groups": 1,
        "failed_trajectories": 7,
        "failure_reasons": {"env step timed out": 5, "EnvFailure: boom": 2},
        "env_worker_restarts": 1,
        "retried_groups": 2,
        "sft": None,
        "total_wall_s": 75.25,
    }


def write_run(run: Path, *, summary: bool = True) -> Path:
    run.mkdir()
    cfg = validate(
        Config,
        {
            "name": "demo",
            "tasks": [{"name": "lake", "env": {"id": "frozen_lake"}}, {"name": "box", "env": {"id": "sokoban"}}],
        },
    )
    (run / "config.yaml").write_text(dump_yaml(cfg))
    steps = [_step(1, 0.25, 0.1), _step(2, 0.5, 0.3, heldout_success=0.37), _step(3, 0.75, 0.6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in steps))
    (run / "timeline.jsonl").write_text(
        "".join(
            json.dumps({"worker": w, "role": r, "kind": k, "t0": t0, "t1": t1, "step": 1}) + "\n"
            for r, w, k, t0, t1 in SPANS
        )
    )
    if summary:
        (run / "summary.json").write_text(json.dumps(_summary(), indent=1))
    return run


def test_report_md_holds_the_run_in_numbers(tmp_path):
    run = write_run(tmp_path / "demo-20261130-120000")
    outputs = build_report(run)
    assert run / "report.md" in outputs
    text = (run / "report.md").read_text()
    assert text.startswith("# Run report: demo-20261130-120000\n")
    assert "Held-out success **0.315 before RL -> 0.42 after RL** (200 greedy episodes" in text
    # what RL added beyond the warm start, and how much of each batch could teach anything
    assert "RL added **+10.5 points** beyond the warm start. On average 62 % of each step's trained groups" in text
    assert "Dynamic sampling dropped" not in text  # the run dropped nothing
    assert (
        "| evaluation | policy version | episodes | success | mean reward | failed | success: box | success: lake |"
        in text
    )
    assert "| before RL | 0 | 200 | 0.315 | -0.185 | 1 | 0.23 | 0.4 |" in text
    assert "| step 2 | 2 | 200 | 0.37 | -0.13 | 1 | 0.29 | 0.45 |" in text
    assert "| after RL | 3 | 200 | 0.42 | -0.08 | 1 | 0.34 | 0.5 |" in text
    # Training figures from metrics.jsonl: first, last, mean, max.
    assert "3 training steps logged (steps 1 to 3)." in text
    assert "| train success (sampled) | 0.25 | 0.75 | 0.5 | 0.75 |" in text
    assert "| step time, s | 3 | 5 | 4 | 5 |" in text
    # Bubble fractions computed from the spans over the RL window, evaluation excluded.
    assert "| env | 0.25 |" in text and "| rollout | 0.1 |" in text and "| train | 0.6 |" in text
    assert "| controller |" not in text
    assert json.loads((run / "summary.json").read_text())["bubble_fraction"] == pytest.approx(
        {"env": 0.25, "rollout": 0.1, "train": 0.6}
    )
    # Counters and failure reasons.
    for row in (
        "| groups trained | 24 |",
        "| groups dropped as stale | 3 |",
        "| failed trajectories | 7 |",
        "| total wall time, s (SFT and Ray start-up included) | 75.25 |",
        "| dead rollout replicas | rollout-1 |",
        "| env step timed out | 5 |",
        "| EnvFailure: boom | 2 |",
    ):
        assert row in text, row
    # The resolved config, verbatim.
    assert "```yaml\n" + (run / "config.yaml").read_text() + "```\n" in text
    # Every image link points at a file the report wrote next to it.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == ["learning_curve.png", "timeline.png"]
    for link in links:
        assert (run / link).is_file() and (run / link).stat().st_size > 0
    assert "did not finish" not in text


def test_trained_vs_admitted_composition_is_plotted_per_step(tmp_path):
    run = write_run(tmp_path / "run")
    composition = [
        {"trained_success": 0.25, "trained_tokens": 40.0, "admitted_success": 0.5, "admitted_tokens": 60.0},
        {"trained_success": 0.5, "trained_tokens": 50.0, "admitted_success": None, "admitted_tokens": None},
        {"trained_success": 0.75, "trained_tokens": 30.0, "admitted_success": 0.25, "admitted_tokens": 20.0},
    ]
    rows = [_step(i + 1, 0.5, 0.1, **c) for i, c in enumerate(composition)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    series = composition_series(read_metrics(run))
    assert series["step"] == [1.0, 2.0, 3.0]
    assert series["trained_success"] == [0.25, 0.5, 0.75] and series["trained_tokens"] == [40.0, 50.0, 30.0]
    assert series["admitted_success"][::2] == [0.5, 0.25] and series["admitted_tokens"][::2] == [60.0, 20.0]
    assert all(v != v for v in (series["admitted_success"][1], series["admitted_tokens"][1]))  # NaN: none ended
    build_report(run)
    text = (run / "report.md").read_text()
    assert "## What is trained" in text and "![trained vs admitted](composition.png)" in text
    assert (run / "composition.png").stat().st_size > 0


def test_a_run_without_composition_records_gets_no_composition_plot(tmp_path):
    run = write_run(tmp_path / "run")
    build_report(run)
    assert not (run / "composition.png").exists() and "What is trained" not in (run / "report.md").read_text()


def test_report_is_rebuilt_identically(tmp_path):
    run = write_run(tmp_path / "run")
    build_report(run)
    first = (run / "report.md").read_text()
    build_report(run)
    assert (run / "report.md").read_text() == first


def test_a_run_that_stopped_early_still_gets_a_report(tmp_path):
    run = write_run(tmp_path / "stopped", summary=False)
    build_report(run)
    text = (run / "report.md").read_text()
    assert "the run did not finish" in text
    assert "| step 2 | 2 | - | 0.37 |" in text  # held-out figure from metrics.jsonl
    assert "No counters: `summary.json` is missing." in text
    build_report(run)  # the first call wrote summary.json with only the bubble fractions
    assert "the run did not finish" in (run / "report.md").read_text()


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_missing_or_empty_run_dir_is_a_one_line_error(tmp_path, capsys, make):
    run = tmp_path / "nothing"
    if make == "empty":
        run.mkdir()
    with pytest.raises(ReportError):
        build_report(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rollarc report: {run} ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_corrupt_metrics_line_names_file_and_line(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "rew\n')
    assert main(["report", str(run)]) == 2
    assert "metrics.jsonl, line 4: not valid JSON" in capsys.readouterr().err


def test_cli_prints_the_files_it_wrote(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["report", str(run)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(run / "report.md") in printed and str(run / "timeline.png") in printed


def test_a_stopped_run_reports_its_reason_and_failure_examples(tmp_path):
    run = write_run(tmp_path / "demo-20261130-130000", summary=False)
    stopped = {
        **_summary(),
        "status": "stopped",
        "stop_reason": "the last 16 groups all failed; reasons: env_step_timeout (32)",
        "failure_reasons": {"env_step_timeout": 32},
        "failure_examples": {"env_step_timeout": ["env step 0: timed out after 0.5 s in step"]},
    }
    (run / "summary.json").write_text(json.dumps(stopped))
    build_report(run)
    text = (run / "report.md").read_text()
    assert "**The run stopped early:** the last 16 groups all failed; reasons: env_step_timeout (32)" in text
    assert "| env_step_timeout | 32 |" in text
    assert "- `env_step_timeout`: env step 0: timed out after 0.5 s in step" in text


def test_signal_fraction_and_rl_gain_by_hand():
    from rollarc.report.run_dir import MetricsRecord, rl_gain_points, signal_fraction

    records = [
        MetricsRecord(step=1, signal_groups_frac=0.25),
        MetricsRecord(step=2),
        MetricsRecord(step=3, signal_groups_frac=0.75),
    ]
    assert signal_fraction(records) == 0.5  # the step without the key is left out, not counted as 0
    assert signal_fraction([MetricsRecord(step=1)]) is None
    assert rl_gain_points(0.315, 0.42) == 10.5 and rl_gain_points(None, 0.42) is None


def test_report_says_how_many_finished_groups_dynamic_sampling_dropped(tmp_path):
    run = write_run(tmp_path / "ds-20261205-070000")
    summary = json.loads((run / "summary.json").read_text())
    summary.update(signal_groups_frac_mean=1.0, dropped_no_signal_groups=3007, finished_signal_share=0.5536)
    (run / "summary.json").write_text(json.dumps(summary))
    build_report(run)
    text = (run / "report.md").read_text()
    assert (
        "On average 100 % of each step's trained groups had a learning signal (rewards that differ within the "
        "group; the rest had zero advantage). Dynamic sampling dropped 3,007 finished groups whose rewards were "
        "all equal: 55 % of the finished groups had a signal."
    ) in text


def test_finished_signal_share_counts_the_groups_dynamic_sampling_dropped():
    from rollarc.report.run_dir import MetricsRecord, finished_signal_share

    # Without dynamic sampling: 16 groups at 0.25 with signal, then 16 at 0.75: (4 + 12) / 32.
    plain = [
        MetricsRecord(step=1, groups_trained=16, signal_groups_frac=0.25),
        MetricsRecord(step=2, groups_trained=32, signal_groups_frac=0.75),
    ]
    assert finished_signal_share(plain) == 0.5
    # With it: 32 trained groups all with signal, 48 dropped by the end: 32 / 80. A step without the
    # fraction still moves the running total (its 8 groups count neither way).
    dropped = [
        MetricsRecord(step=1, groups_trained=16, signal_groups_frac=1.0, dropped_no_signal_groups=20),
        MetricsRecord(step=2, groups_trained=24, dropped_no_signal_groups=30),
        MetricsRecord(step=3, groups_trained=40, signal_groups_frac=1.0, dropped_no_signal_groups=48),
    ]
    assert finished_signal_share(dropped) == 32 / 80
    assert finished_signal_share([MetricsRecord(step=1)]) is None
