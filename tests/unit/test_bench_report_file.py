"""Publishing a benchmark: its block of docs/benchmarks.md replaced whole, the others untouched, JSON beside it."""

from __future__ import annotations

import json
from pathlib import Path

from rollarc.bench.report_file import (
    HEADER,
    PAGE_ENV,
    git_commit,
    json_path,
    machine,
    page_path,
    publish,
)

PAGE = """# Benchmarks

intro

## `rollarc bench engine`

<!-- bench:engine:start -->
Measured 2026-01-01 on old, 1 cores with `rollarc bench engine`:

| old | table |
<!-- bench:engine:end -->

## `rollarc bench sim`

<!-- bench:sim:start -->
Measured 2026-01-02 on old, 1 cores with `rollarc bench sim`:

sim figures
<!-- bench:sim:end -->

trailing text
"""


def test_full_run_replaces_only_its_block_and_writes_json(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    result = {"rollarc_tok_s": 1980.5, "ratio_vs_hf_generate": 7.66, "requests": 256}
    written = publish(
        "engine", "| new | table |", result, "rollarc bench engine", quick=False, no_docs=False, page=page
    )
    assert written == [page, tmp_path / "benchmarks" / "engine.json"]
    text = page.read_text()
    block = text.split("<!-- bench:engine:start -->\n", 1)[1].split("<!-- bench:engine:end -->", 1)[0]
    assert block.startswith("Measured ") and f" on {machine()} (machine load not measured)" in block
    assert f" at commit `{git_commit()}` with `rollarc bench engine`:\n\n" in block
    assert block.endswith("\n\n| new | table |\n")
    assert "| old | table |" not in text
    # Everything outside the block is byte for byte what it was.
    before, after = PAGE.split("<!-- bench:engine:start -->")[0], PAGE.split("<!-- bench:engine:end -->")[1]
    assert text.startswith(before) and text.endswith(after)
    assert "sim figures" in text and "Measured 2026-01-02 on old, 1 cores with `rollarc bench sim`" in text
    saved = json.loads((tmp_path / "benchmarks" / "engine.json").read_text())
    assert saved == {
        "bench": "engine",
        "date": block.split()[1],
        "machine": machine(),
        "command": "rollarc bench engine",
        "commit": git_commit(),
        "machine_load": None,  # no monitor in a test: only `rollarc bench NAME` starts one
        **result,
    }
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_rerun_is_idempotent_apart_from_the_block(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    publish("sim", "first", {"x": 1}, "rollarc bench sim", quick=False, no_docs=False, page=page)
    once = page.read_text()
    publish("sim", "second", {"x": 2}, "rollarc bench sim", quick=False, no_docs=False, page=page)
    twice = page.read_text()
    assert twice == once.replace("\nfirst\n", "\nsecond\n")
    assert twice.count("<!-- bench:sim:start -->") == 1
    assert json.loads(json_path("sim", page).read_text())["x"] == 2


def test_missing_page_is_created_with_the_header_and_a_new_block_is_appended(tmp_path):
    page = tmp_path / "benchmarks.md"
    publish(
        "reward",
        "reward body",
        {"bench": "reward", "cost": 0.64},
        "rollarc bench reward",
        quick=False,
        no_docs=False,
        page=page,
    )
    text = page.read_text()
    assert text.startswith(HEADER)
    assert "\n## `rollarc bench reward`\n\n<!-- bench:reward:start -->\n" in text
    assert text.endswith("reward body\n<!-- bench:reward:end -->\n")
    publish("async", "async body", {"sync_s": 1.0}, "rollarc bench async", quick=False, no_docs=False, page=page)
    text2 = page.read_text()
    assert text2.startswith(text.rstrip("\n")) and "<!-- bench:async:end -->" in text2
    assert sorted(p.name for p in (tmp_path / "benchmarks").iterdir()) == ["async.json", "reward.json"]


def test_quick_and_no_docs_runs_write_nothing(tmp_path):
    page = tmp_path / "benchmarks.md"
    assert publish("engine", "body", {"x": 1}, "rollarc bench engine", quick=True, no_docs=False, page=page) == []
    assert publish("engine", "body", {"x": 1}, "rollarc bench engine", quick=False, no_docs=True, page=page) == []
    assert list(tmp_path.iterdir()) == []


def test_no_checkout_means_nothing_is_written(tmp_path):
    page = tmp_path / "no-docs-dir" / "benchmarks.md"
    assert publish("engine", "body", {"x": 1}, "rollarc bench engine", quick=False, no_docs=False, page=page) == []
    assert not (tmp_path / "no-docs-dir").exists()


def test_env_var_redirects_the_page(tmp_path, monkeypatch):
    monkeypatch.setenv(PAGE_ENV, str(tmp_path / "b.md"))
    assert page_path() == tmp_path / "b.md"
    monkeypatch.delenv(PAGE_ENV)
    assert page_path().parts[-2:] == ("docs", "benchmarks.md")


def test_checked_in_page_holds_every_benchmark_block():
    checked_in = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    text = checked_in.read_text()
    for name in ("engine", "async", "reward", "weightsync", "sim"):
        assert text.count(f"<!-- bench:{name}:start -->") == 1 and text.count(f"<!-- bench:{name}:end -->") == 1
    assert text.startswith(HEADER)
