"""The run directory's typed records: round trips, forward compatibility, errors that name file, line and key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rollarc.report.run_dir import (
    MetricsRecord,
    QuantileSummary,
    RunDirError,
    Span,
    Summary,
    TaskProfile,
    TaskProfiles,
    from_dict,
    read_metrics,
    read_summary,
    read_task_profiles,
    read_timeline,
    to_dict,
    truncate_metrics,
    truncate_timeline,
    write_json,
    write_jsonl,
)
from rollarc.runtime.task_profile import Reservoir

DOCS = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_unknown_keys_are_kept_and_written_back(tmp_path):
    row = {"step": 3, "reward": 1, "loss": 0.25, "new_metric": {"x": 1}, "per_task": {"a": {"trajectories": 4}}}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (record,) = read_metrics(tmp_path)
    assert (record.step, record.reward, record.loss) == (3, 1.0, 0.25)
    assert record.extra == {"new_metric": {"x": 1}} and record.success is None
    assert to_dict(record) == {**row, "reward": 1.0}


def test_bad_lines_and_keys_are_named(tmp_path):
    (tmp_path / "timeline.jsonl").write_text('{"kind": "train", "t0": 0, "t1": 1}\n\n{"kind": "sync", "t0": 2}\n')
    with pytest.raises(RunDirError, match=r"timeline\.jsonl, line 3: missing key 't1'"):
        read_timeline(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "tokens": 2.5}\n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl, line 2: tokens: expected an integer, got 2\.5"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": \n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl, line 2: not valid JSON"):
        read_metrics(tmp_path)


def test_records_round_trip_through_their_files(tmp_path):
    q = QuantileSummary(n=4, mean=2.0, p50=2.0, p90=3.0, p99=3.0)
    profiles = TaskProfiles(
        tasks={"a": TaskProfile(q, q, q, q, q, reward_s=QuantileSummary(n=0), ok=4)},
        groups_per_step=2,
        group_size=2,
        max_staleness=1,
        weights={"a": 1.0},
    )
    write_json(tmp_path / "task_profiles.json", profiles)
    back = read_task_profiles(tmp_path)
    assert back.tasks["a"].turns == q and back.tasks["a"].ok == 4 and back.max_staleness == 1
    assert back.tasks["a"].reward_s is not None and back.tasks["a"].reward_s.n == 0
    write_json(tmp_path / "summary.json", Summary(steps=3, bubble_fraction={"train": 0.5}, extra={"later": 1}))
    assert read_summary(tmp_path) == Summary(steps=3, bubble_fraction={"train": 0.5}, extra={"later": 1})
    assert read_summary(tmp_path / "nowhere") == Summary()  # a stopped run: no summary yet


def test_truncation_keeps_what_came_before_the_checkpoint(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [MetricsRecord(step=s) for s in (1, 2, 3)])
    truncate_metrics(tmp_path, 2)
    assert [m.step for m in read_metrics(tmp_path)] == [1, 2]
    spans = [Span("train", 0.0, 1.0), Span("generate", 4.0, 6.0), Span("sync", 5.0, 5.5), Span("eval", 6.0, 7.0)]
    write_jsonl(tmp_path / "timeline.jsonl", spans)
    truncate_timeline(tmp_path, 5.0)  # the checkpoint's clock: later work is redone by the resumed run
    assert [(s.kind, s.t0, s.t1) for s in read_timeline(tmp_path)] == [("train", 0.0, 1.0), ("generate", 4.0, 5.0)]


def test_every_record_field_is_documented_in_the_run_directory_section():
    text = DOCS.read_text()
    section = text[text.index("## The run directory") :]
    section = section[: section.index("\n## ", 3)]
    for record in (Span, MetricsRecord, QuantileSummary, TaskProfile, TaskProfiles, Summary):
        assert record.__name__ in section, record.__name__
        for field in dataclasses.fields(record):
            if field.name != "extra":
                assert f"`{field.name}`" in section, f"{record.__name__}.{field.name} is not in docs/architecture.md"


def test_from_dict_rejects_a_non_object():
    with pytest.raises(RunDirError, match=r"summary\.json: expected a JSON object, got list"):
        from_dict(Summary, [], "summary.json")


def test_task_profiler_state_continues_the_reservoir_exactly():
    whole, first = Reservoir(size=8, seed=3), Reservoir(size=8, seed=3)
    for v in range(20):
        whole.add(float(v))
        first.add(float(v))
    resumed = Reservoir.from_state(json.loads(json.dumps(first.state())))
    for v in range(20, 60):
        whole.add(float(v))
        resumed.add(float(v))
    assert (resumed.values, resumed.count, resumed.total) == (whole.values, whole.count, whole.total)


def test_writers_keep_a_misfit_value_rather_than_lose_the_record():
    data = {"step": 2, "tokens": "many", "loss": 0.5}
    with pytest.raises(RunDirError, match="tokens: expected an integer"):
        from_dict(MetricsRecord, data, "metrics")
    record = from_dict(MetricsRecord, data, "metrics", lenient=True)
    assert record.tokens is None and record.extra == {"tokens": "many"} and to_dict(record) == data
