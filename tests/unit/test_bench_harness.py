"""The shared benchmark harness: common flags, seeds, ``--runs`` roots and publication in one place, and every
``bench/*.py`` ``main`` short enough to read as workload plus comparison."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from rollarc.bench import harness, runs_root
from rollarc.bench.report_file import PAGE_ENV

BENCH = Path(harness.__file__).parent
MAIN_LINES = 60  # issue 45: every bench/*.py main under this many lines
# Modules not yet on the harness, exempt until ported (issue 45 item 5): none left.
PENDING: set[str] = set()


def main_lengths() -> dict[str, int]:
    out = {}
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                out[path.name] = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    return out


def test_every_bench_main_is_under_the_limit() -> None:
    lengths = main_lengths()
    assert set(lengths) >= PENDING, "a pending module is gone or has no main: drop it from PENDING"
    too_long = {name: n for name, n in lengths.items() if n >= MAIN_LINES and name not in PENDING}
    assert too_long == {}


def test_no_bench_module_over_500_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in BENCH.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 500 and name not in PENDING} == {}


def test_the_common_flags_and_only_the_asked_optional_ones() -> None:
    parser = harness.bench_parser("bench x", "First line.\nMore.", config="a.yaml", seeds="help", publish_as="x")
    harness.add_overrides(parser)
    args = parser.parse_args(["--quick", "--no-readme", "--json", "--seeds", "4", "k=v"])
    assert (args.quick, args.no_docs, args.json, args.seeds, args.config, args.publish_as) == (
        True,
        True,
        True,
        4,
        "a.yaml",
        "x",
    )
    assert args.overrides == ["k=v"] and not hasattr(args, "runs")
    assert parser.prog == "rollarc bench x" and parser.description == "First line."
    bare = harness.bench_parser("bench y", None).parse_args([])
    assert vars(bare) == {"quick": False, "json": False, "no_docs": False}


def test_config_flag_without_a_default() -> None:
    args = harness.bench_parser("bench x", None, config_help="a YAML").parse_args([])
    assert args.config is None


def test_quick_or_picks_the_given_value_then_the_run_kind() -> None:
    assert harness.quick_or(7, True, 3, 1) == 7
    assert harness.quick_or(None, True, 3, 1) == 1
    assert harness.quick_or(None, False, 3, 1) == 3
    assert harness.quick_or(0, False, 3, 1) == 0  # a given zero is a value, not "not given"


def test_seed_count(capsys) -> None:
    parser = harness.bench_parser("bench x", None, seeds="n")
    assert harness.seed_count(parser, parser.parse_args([]), 3) == 3
    assert harness.seed_count(parser, parser.parse_args(["--quick"]), 3) == 1
    assert harness.seed_count(parser, parser.parse_args(["--quick", "--seeds", "2"]), 3) == 2
    with pytest.raises(SystemExit) as exit_info:
        harness.seed_count(parser, parser.parse_args(["--seeds", "0"]), 3)
    assert exit_info.value.code == 2
    assert "--seeds 0: at least one seed is needed" in capsys.readouterr().err


def test_overrides_need_their_own_name_in_a_full_run(capsys) -> None:
    parser = harness.bench_parser("bench x", None, publish_as="x")
    harness.add_overrides(parser)
    for argv in (["--publish-as", "y", "k=v"], ["--quick", "k=v"], ["--no-docs", "k=v"], []):
        harness.refuse_unnamed_overrides(parser, parser.parse_args(argv), "x")  # accepted
    with pytest.raises(SystemExit):
        harness.refuse_unnamed_overrides(parser, parser.parse_args(["k=v"]), "x")
    assert "--publish-as NAME" in capsys.readouterr().err


def test_median_or_none_skips_misses() -> None:
    assert harness.median_or_none([3.0, None, 1.0, 2.0]) == 2.0
    assert harness.median_or_none([4.0, 1.0]) == 2.5
    assert harness.median_or_none([None, None]) is None
    assert harness.median_or_none([]) is None


def test_run_seeds_runs_each_in_order_and_announces_it(capsys) -> None:
    assert harness.run_seeds([2, 0, 5], lambda s: s * 10) == [20, 0, 50]
    assert capsys.readouterr().out.splitlines() == ["== seed 2", "== seed 0", "== seed 5"]


def test_runs_folder(tmp_path: Path) -> None:
    assert harness.runs_folder(str(tmp_path / "r"), "x") == tmp_path / "r"
    made = harness.runs_folder(None, "x")
    assert made.is_dir() and made.name.startswith("rollarc-bench-x-")
    made.rmdir()


def test_command_quotes_the_arguments() -> None:
    assert harness.command("rose", ["--train", "a b"]) == "rollarc bench rose --train 'a b'"


def test_open_runs_records_the_root_and_refuses_another_commit(tmp_path: Path, capsys) -> None:
    parser = harness.bench_parser("bench x", None)
    meta = harness.open_runs(parser, tmp_path, ["train.steps=3"])
    record = json.loads((tmp_path / runs_root.META_FILE).read_text())
    assert record["overrides"] == ["train.steps=3"] and len(record["sessions"]) == 1
    assert harness.recorded_meta({**meta, "machine_load": {"quiet": True}, "x": 1}) == {
        "commit": meta["commit"],
        "machine_load": {"quiet": True},
    }
    record["commit"] = "0000000"
    (tmp_path / runs_root.META_FILE).write_text(json.dumps(record))
    with pytest.raises(SystemExit):
        harness.open_runs(parser, tmp_path, ["train.steps=3"])
    assert "holds runs of commit 0000000" in capsys.readouterr().err


def test_finish_publishes_a_full_run_only_and_prints_the_json_last(tmp_path: Path, monkeypatch, capsys) -> None:
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    monkeypatch.setenv(PAGE_ENV, str(page))
    parser = harness.bench_parser("bench x", None)
    result = {"speedup": 1.5}
    assert harness.finish("x", "body", result, "rollarc bench x", parser.parse_args(["--quick"]), code=3) == 3
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == result and not page.exists()
    assert harness.finish("x", "body", result, "rollarc bench x", parser.parse_args([]), publishable=False) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == result and not page.exists()
    assert harness.finish("x", "body", result, "rollarc bench x", parser.parse_args([])) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == result
    assert "<!-- bench:x:start -->" in page.read_text() and "body" in page.read_text()
    written = json.loads((tmp_path / "docs" / "benchmarks" / "x.json").read_text())
    assert written["speedup"] == 1.5 and written["command"] == "rollarc bench x"
